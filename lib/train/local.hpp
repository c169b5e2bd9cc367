// Single-process training (train.mode = "local", also what a world of one
// rank runs): the reference loop that every distributed mode is compared with.
#pragma once

#include <cstdint>
#include <filesystem>

#include "config/config.hpp"
#include "train/compute.hpp"
#include "train/evaluation.hpp"

namespace syncopt::train {

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
// eval.jsonl, params.f32, params_ema.f32 and, last, summary.json. `quiet`
// silences the progress line.
LocalResult run_local(const config::Config& cfg, const Compute& compute, bool quiet);

}  // namespace syncopt::train
