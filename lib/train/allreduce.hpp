// allreduce mode: every rank a worker; the mean gradient by a reducer (MPI,
// or NCCL on GPUs), the optimiser applied on every rank — the Horovod / DDP
// baseline. Rank 0 writes the step records, and evaluates when due.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "comm/reducer.hpp"
#include "common/clock.hpp"
#include "config/config.hpp"
#include "data/dataset.hpp"
#include "layout/roles.hpp"
#include "metrics/records.hpp"
#include "metrics/step_record.hpp"
#include "nn/backend.hpp"
#include "train/evaluation.hpp"
#include "worker/straggler.hpp"

namespace syncopt::train {

struct AllreduceSetup {
  const config::Config* cfg = nullptr;
  const layout::Roles* roles = nullptr;
  const layout::Plan* plan = nullptr;
  int rank = 0;
  nn::Network* net = nullptr;
  const data::Dataset* train = nullptr;
  const float* initial = nullptr;
  std::size_t count = 0;
  const worker::StragglerModel* stragglers = nullptr;
  comm::Reducer* reducer = nullptr;
  MPI_Comm comm = MPI_COMM_NULL;  // for the gather of arrival times to rank 0
  const RunClock* clock = nullptr;
  // Rank 0 only:
  metrics::StepLog* steps_log = nullptr;
  EvalLog* eval = nullptr;
  metrics::Progress* progress = nullptr;
};

struct AllreduceResult {
  std::vector<float> theta, ema;
  std::uint64_t examples = 0;
};

AllreduceResult run_allreduce(const AllreduceSetup& setup);

}  // namespace syncopt::train
