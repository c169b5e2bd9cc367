// allreduce mode: every rank a worker; the mean gradient by a reducer (MPI,
// or NCCL on GPUs), the optimiser applied on every rank's replica — the
// Horovod / DDP baseline. After every step the ranks exchange their arrival
// times and flags, so that they agree, at the same step, to stop on a signal
// or to save a checkpoint; rank 0 writes the step records and evaluates.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <vector>

#include "comm/reducer.hpp"
#include "common/clock.hpp"
#include "config/config.hpp"
#include "data/dataset.hpp"
#include "layout/roles.hpp"
#include "metrics/records.hpp"
#include "metrics/step_record.hpp"
#include "replica/replica.hpp"
#include "train/evaluation.hpp"
#include "worker/straggler.hpp"

namespace syncopt::train {

struct AllreduceSetup {
  const config::Config* cfg = nullptr;
  const layout::Roles* roles = nullptr;
  const layout::Plan* plan = nullptr;
  int rank = 0;
  replica::Replica* replica = nullptr;
  const data::Dataset* train = nullptr;
  const worker::StragglerModel* stragglers = nullptr;
  comm::Reducer* reducer = nullptr;
  MPI_Comm comm = MPI_COMM_NULL;  // the ranks' exchange of times and flags
  RunClock* clock = nullptr;
  std::filesystem::path run_dir;
  // Rank 0 only:
  metrics::StepLog* steps_log = nullptr;
  metrics::JsonlWriter* eval_file = nullptr;
  EvalLog* eval = nullptr;
  metrics::Progress* progress = nullptr;
};

struct AllreduceResult {
  std::vector<float> theta, ema;  // rank 0
  std::uint64_t steps = 0;
  std::uint64_t examples = 0;
  int stop_signal = 0;  // the signal the ranks stopped on, or 0
  // Divergence, which every rank sees at the same step (they hold the same
  // mean gradient): exit 70, nothing non-finite saved.
  std::string diverged;
};

// Trains from the latest checkpoint when run.resume (every rank reads its
// part), else from step 0.
AllreduceResult run_allreduce(const AllreduceSetup& setup);

}  // namespace syncopt::train
