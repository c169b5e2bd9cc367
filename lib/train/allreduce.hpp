// allreduce mode: every rank a worker; the mean gradient by a reducer (MPI,
// or NCCL on GPUs), the optimiser applied on every rank's replica — the
// Horovod / DDP baseline. After every step the ranks exchange their arrival
// times and flags, so that they agree, at the same step, to stop on a signal
// or to save a checkpoint; rank 0 writes the step records and evaluates.
//
// Liveness (docs/design.md §10): rank 0 watches every rank's heartbeats and
// every rank watches rank 0's. The collectives are nonblocking and waited
// for with a hook on the watch (comm/collective.hpp), so a dead or stopped
// rank ends the run after cluster.dead_after_s instead of hanging it: rank 0
// tells the others (ENDING), saves a checkpoint of the last step every rank
// applied on its own (each rank's data position follows from the step), and
// the run ends with 69. When rank 0 itself is silent, the others end the job
// without it (rundir/ending.hpp).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/liveness.hpp"
#include "comm/peers.hpp"
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
  comm::Watch* watch = nullptr;   // rank 0 watches all; the others rank 0
  const std::vector<comm::Peer>* peers = nullptr;
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
  // Rank 0: ranks that died or ended with an error; the run ended with
  // `failed_code` (69 for a death) and `failed` says why; a checkpoint of
  // `steps` is saved.
  std::vector<int> lost;
  ExitCode failed_code = ExitCode::kOk;
  std::string failed;
  int reported_by = 0;
  nlohmann::json lost_workers = nlohmann::json::array();
};

// Trains from the latest checkpoint when run.resume (every rank reads its
// part), else from step 0.
AllreduceResult run_allreduce(const AllreduceSetup& setup);

}  // namespace syncopt::train
