// What every trainer derives from the config before it trains: the data
// loading options, the model spec of the loaded data, and the model's
// parameter groups as the shard placement sees them.
#pragma once

#include <vector>

#include "config/config.hpp"
#include "data/dataset.hpp"
#include "layout/placement.hpp"
#include "nn/model.hpp"

namespace syncopt::train {

// The model spec for a config and the data's image shape.
nn::ModelSpec model_spec(const config::Config& cfg, const data::Dataset& train);

// The model spec a config will have once its data is loaded (the image
// shape from data.name: 3x32x32 for cifar10, else 1x28x28), for what must
// not load the data (--dry-run, simulate, plan).
nn::ModelSpec expected_model_spec(const config::Config& cfg);

// The model's layers with parameters (nn::Graph::groups) in forward order,
// for layout::balanced_slices and layout::make_buckets.
std::vector<layout::Group> layout_groups(const nn::ModelSpec& spec);

// Data loading options from the config.
data::LoadOptions load_options(const config::Config& cfg);

// Batch loading options (augmentation) from the config.
data::AugmentOptions augment_options(const config::Config& cfg);

}  // namespace syncopt::train
