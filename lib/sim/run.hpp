// `syncopt simulate`: a config (and optionally a real run to fit) in, a run
// directory out, with the files of a real run (config.toml, steps.jsonl,
// summary.json, tb/) so that `syncopt report`, scripts/plot.py and
// TensorBoard read it as one. Times in it are simulated seconds; every step
// record and the summary carry "clock": "simulated", and the summary a "sim"
// block saying what was modelled.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "sim/simulator.hpp"

namespace syncopt::sim {

// Examples in one epoch of the config's data set without loading it: the
// synthetic count, 60000 (fashion-mnist), 50000 (cifar10), capped by
// data.limit_train. ConfigError for data.name = idx with train.steps = 0
// (its size is in its files: set train.steps).
std::int64_t nominal_train_count(const config::Config& cfg);

// The simulation a config describes: K = sim.workers, S = cluster.ps,
// N from train.mode and train.backups, the run length from train.steps or
// train.epochs, messages from `param_count` floats (sim.param_count wins
// when set), the network and the given timing from [sim]. With the model's
// `layers` (and no sim.param_count) the shards hold whole layers
// (layout::balanced_slices) and exchange.pipeline and bucket_bytes apply;
// without, equal slices of floats and whole messages. `stragglers` must
// outlive the setup.
SimSetup make_setup(const config::Config& cfg, std::size_t param_count, const TimingModel& timing,
                    const worker::StragglerModel* stragglers,
                    const std::vector<LayerCost>& layers = {});

struct SimulateOptions {
  std::size_t param_count = 0;                // the model's (the caller knows the data's shape)
  std::vector<LayerCost> layers;              // the model's layers, in forward order
  std::optional<std::filesystem::path> from;  // a real run to fit the timing to
};

struct SimulateOutcome {
  std::filesystem::path run_dir;
  std::string report;  // what `syncopt report` prints
  SimResult result;
  double cpu_s = 0.0;  // host seconds the simulation itself took
};

SimulateOutcome simulate_run(const config::Config& cfg, const SimulateOptions& options);

}  // namespace syncopt::sim
