// The parameter-server shard's MPI loop: keeps one receive posted per worker
// (and one for the evaluator), feeds gradients to ShardCore, applies the
// optimiser to its slice, and answers pulls under the mode's rule.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "metrics/records.hpp"
#include "train/roles.hpp"

namespace syncopt::ps {

struct ShardSetup {
  const config::Config* cfg = nullptr;
  const train::Roles* roles = nullptr;
  int shard = 0;
  train::Slice slice;
  const float* initial = nullptr;   // the slice's initial parameters
  std::uint64_t total_steps = 0;    // updates to apply (when target_examples is 0)
  std::uint64_t target_examples = 0;  // train.epochs in accepted examples (train.steps = 0)
  double train_count = 1.0;         // examples per epoch, for the lr schedule
  double lr_multiplier = 1.0;       // N when optim.scale_lr_by_n
  MPI_Comm data_comm = MPI_COMM_NULL;
  MPI_Comm ctrl_comm = MPI_COMM_NULL;
  double (*now)() = nullptr;        // run-relative seconds
  metrics::JsonlWriter* steps_log = nullptr;  // shard 0 streams its records here
  // Optional in-line evaluation (no evaluator rank, one shard): called after
  // update `step` with the full theta and EMA.
  std::function<void(std::uint64_t step, std::uint64_t examples, const float* theta,
                     const float* ema)>
      inline_eval;
  std::uint64_t inline_eval_every = 0;
  double inline_eval_every_s = 0.0;
  // Called after every update (the progress line on rank 0).
  std::function<void(std::uint64_t step, std::uint64_t examples, float loss)> on_update;
};

struct ShardResult {
  std::vector<float> theta, ema;
  std::string records;         // step records as JSON lines (shards other than 0)
  std::uint64_t steps = 0;
  std::uint64_t examples = 0;  // accepted examples
  std::int64_t after_end = 0;  // gradients that arrived after the last update
};

ShardResult run_shard(const ShardSetup& setup);

}  // namespace syncopt::ps
