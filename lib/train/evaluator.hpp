// The evaluator rank (cluster.evaluator = true): pulls θ and the EMA θ̄ from
// every shard at the configured interval and evaluates them on the test set
// without stalling training.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "common/clock.hpp"
#include "config/config.hpp"
#include "layout/roles.hpp"
#include "train/evaluation.hpp"

namespace syncopt::train {

struct EvaluatorSetup {
  const config::Config* cfg = nullptr;
  const layout::Roles* roles = nullptr;
  const layout::Plan* plan = nullptr;
  std::vector<layout::Slice> slices;  // of every shard
  std::size_t param_count = 0;
  EvalLog* eval = nullptr;
  const RunClock* clock = nullptr;
  MPI_Comm ctrl_comm = MPI_COMM_NULL;
};

// Returns once every shard has said training ended and has been told goodbye.
// The final evaluation is not made here but in the end phase, by this rank.
void run_evaluator(const EvaluatorSetup& setup);

}  // namespace syncopt::train
