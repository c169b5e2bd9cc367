// Single-process training (train.mode = "local", also what a world of one
// rank runs): the reference loop that every distributed mode is compared
// with, and the simplest home of checkpoints, resume and stop signals.
#pragma once

#include <cstdint>
#include <filesystem>

#include "config/config.hpp"
#include "rundir/meta.hpp"
#include "rundir/open.hpp"
#include "train/compute.hpp"
#include "train/evaluation.hpp"

namespace syncopt::train {

struct LocalResult {
  std::filesystem::path run_dir;
  rundir::Outcome outcome;  // completed, or stopped by a signal (exit 75)
  std::int64_t steps = 0;
  std::int64_t examples = 0;
  double wall_s = 0.0;
  double examples_per_s = 0.0;  // training loop only, evaluation excluded
  bool evaluated = false;       // the final parameters were tested (a completed run)
  EvalResult final_eval;
  EvalResult final_eval_ema;
};

// Loads the data (errors before any output exists), opens the run directory
// (new, or resumed from its latest checkpoint), trains, checkpoints every
// run.checkpoint_every_s / _steps, at the end and on a stop signal, and
// writes config.toml, steps.jsonl, eval.jsonl, params.f32, params_ema.f32
// and, last, summary.json. A failure is recorded in summary.json and thrown.
// `quiet` silences the progress line.
// `inv` goes into run.json (rundir/meta.hpp).
LocalResult run_local(const config::Config& cfg, const Compute& compute, bool quiet,
                      const rundir::Invocation& inv = {});

}  // namespace syncopt::train
