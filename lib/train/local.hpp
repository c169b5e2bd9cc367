// Single-process training (train.mode = "local", also what a world of one
// rank runs): the reference loop that every distributed mode is compared with.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "config/config.hpp"
#include "data/dataset.hpp"
#include "metrics/records.hpp"
#include "nn/backend.hpp"

namespace syncopt::train {

struct EvalResult {
  double loss = 0.0;
  double accuracy = 0.0;  // fraction in [0, 1]
};

// Mean cross-entropy and accuracy of `params` on all of `data`, in batches of
// at most net.max_batch(). `logits` is scratch.
EvalResult evaluate(nn::Network& net, const float* params, const data::Dataset& data);

// One eval.jsonl record: test loss and accuracy of theta and of its EMA.
void write_eval(metrics::JsonlWriter& log, std::uint64_t step, double wall_s,
                std::uint64_t examples, double train_count, const EvalResult& raw,
                const EvalResult& avg);

// The model spec for a config and the data's image shape.
nn::ModelSpec model_spec(const config::Config& cfg, const data::Dataset& train);

// Data loading options from the config.
data::LoadOptions load_options(const config::Config& cfg);

struct LocalResult {
  std::filesystem::path run_dir;
  std::int64_t steps = 0;
  std::int64_t examples = 0;
  double wall_s = 0.0;
  double examples_per_s = 0.0;  // training loop only, evaluation excluded
  EvalResult final_eval;
  EvalResult final_eval_ema;
};

// Loads the data (errors before any output exists), creates the run
// directory, trains, evaluates and writes config.toml, steps.jsonl,
// eval.jsonl and summary.json. `quiet` silences the progress line.
LocalResult run_local(const config::Config& cfg, bool quiet);

}  // namespace syncopt::train
