// What every trainer derives from the config before it trains: the data
// loading options and the model spec of the loaded data.
#pragma once

#include "config/config.hpp"
#include "data/dataset.hpp"
#include "nn/model.hpp"

namespace syncopt::train {

// The model spec for a config and the data's image shape.
nn::ModelSpec model_spec(const config::Config& cfg, const data::Dataset& train);

// Data loading options from the config.
data::LoadOptions load_options(const config::Config& cfg);

// Batch loading options (augmentation) from the config.
data::AugmentOptions augment_options(const config::Config& cfg);

}  // namespace syncopt::train
