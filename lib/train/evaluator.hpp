// The evaluator rank (cluster.evaluator = true): pulls θ and the EMA θ̄ from
// every shard at the configured interval and evaluates them on the test set
// without stalling training. It beats to the shards and watches theirs, and
// saves its part of a checkpoint (how long eval.jsonl is) when shard 0 asks.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <filesystem>
#include <vector>

#include "checkpoint/state.hpp"
#include "comm/liveness.hpp"
#include "comm/peers.hpp"
#include "common/clock.hpp"
#include "common/error.hpp"
#include "config/config.hpp"
#include "layout/roles.hpp"
#include "metrics/records.hpp"
#include "train/evaluation.hpp"

namespace syncopt::train {

struct EvaluatorSetup {
  const config::Config* cfg = nullptr;
  const layout::Roles* roles = nullptr;
  const layout::Plan* plan = nullptr;
  const std::vector<comm::Peer>* peers = nullptr;
  std::vector<layout::Slice> slices;  // of every shard
  std::size_t param_count = 0;
  EvalLog* eval = nullptr;
  metrics::JsonlWriter* eval_file = nullptr;
  const RunClock* clock = nullptr;
  MPI_Comm ctrl_comm = MPI_COMM_NULL;
  MPI_Comm live_comm = MPI_COMM_NULL;
  comm::Watch* watch = nullptr;  // the rank's liveness, owned by the job
  std::filesystem::path run_dir;
  const checkpoint::State* resume = nullptr;  // its part of the checkpoint resumed
};

// Returns once every shard has said training ended, the last checkpoint
// part is saved, and every shard has been told goodbye; the run's exit code
// as shard 0 told it. The final evaluation is made in the end phase.
// UnavailableError when a shard dies; EndedByPeerError when one ends the run.
struct EvaluatorResult {
  ExitCode code = ExitCode::kOk;
  bool peer_lost = false;  // a shard said some rank of the job died
};
EvaluatorResult run_evaluator(const EvaluatorSetup& setup);

}  // namespace syncopt::train
