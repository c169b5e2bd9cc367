// Config -> data and model options (see inputs.hpp).
#include "train/inputs.hpp"

#include "common/error.hpp"
#include "nn/graph.hpp"

namespace syncopt::train {

nn::ModelSpec model_spec(const config::Config& cfg, const data::Dataset& train) {
  nn::ModelSpec spec;
  spec.model = cfg.model.name;
  spec.channels = train.channels;
  spec.height = train.height;
  spec.width = train.width;
  spec.classes = train.classes;
  spec.weight_norm = cfg.model.weight_norm;
  spec.mlp_hidden = static_cast<int>(cfg.model.mlp_hidden);
  spec.layers = cfg.model.layers;
  return spec;
}

nn::ModelSpec expected_model_spec(const config::Config& cfg) {
  nn::ModelSpec spec;
  spec.model = cfg.model.name;
  spec.weight_norm = cfg.model.weight_norm;
  spec.mlp_hidden = static_cast<int>(cfg.model.mlp_hidden);
  spec.layers = cfg.model.layers;
  if (cfg.data.name == config::DataSet::kCifar10) {
    spec.channels = 3;
    spec.height = spec.width = 32;
  }
  if (cfg.data.name == config::DataSet::kNpy || cfg.data.name == config::DataSet::kHdf5) {
    // The files' own shape and classes (headers and labels, no image). When
    // they cannot be read, the defaults: loading the data says why, after
    // the run directory's checks, as for every data set.
    try {
      const data::TrainTest tt = data::open_on_disk(load_options(cfg));
      spec.channels = tt.train.channels;
      spec.height = tt.train.height;
      spec.width = tt.train.width;
      spec.classes = tt.train.classes;
    } catch (const DataError&) {
    } catch (const MissingInputError&) {
    }
  }
  return spec;
}

std::vector<layout::Group> layout_groups(const nn::ModelSpec& spec) {
  std::vector<layout::Group> out;
  for (const auto& g : nn::model_graph(spec).groups) out.push_back({g.name, g.offset, g.count});
  return out;
}

data::LoadOptions load_options(const config::Config& cfg) {
  data::LoadOptions o;
  o.name = cfg.data.name;
  o.path = cfg.data.path;
  o.limit_train = cfg.data.limit_train;
  o.limit_test = cfg.data.limit_test;
  o.synthetic_train = cfg.data.synthetic_train;
  o.synthetic_test = cfg.data.synthetic_test;
  o.train_images = cfg.data.train_images;
  o.train_labels = cfg.data.train_labels;
  o.test_images = cfg.data.test_images;
  o.test_labels = cfg.data.test_labels;
  o.classes = static_cast<int>(cfg.data.classes);
  o.seed = cfg.run.seed;
  return o;
}

data::AugmentOptions augment_options(const config::Config& cfg) {
  return {cfg.data.augment_max_rotate_deg, cfg.data.augment_max_zoom};
}

}  // namespace syncopt::train
