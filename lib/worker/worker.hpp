// The worker's loop in parameter-server modes: pull parameters from every
// shard, compute a gradient on its own data shard, push the slices, repeat
// until every shard has said STOP.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "config/config.hpp"
#include "data/dataset.hpp"
#include "nn/backend.hpp"
#include "train/roles.hpp"
#include "worker/straggler.hpp"

namespace syncopt::worker {

struct WorkerSetup {
  const config::Config* cfg = nullptr;
  const train::Roles* roles = nullptr;
  int worker = 0;                      // 0..K-1
  std::vector<train::Slice> slices;    // of every shard
  std::size_t param_count = 0;
  nn::Network* net = nullptr;
  const data::Dataset* train = nullptr;
  const StragglerModel* stragglers = nullptr;
  MPI_Comm data_comm = MPI_COMM_NULL;
};

struct WorkerResult {
  std::uint64_t gradients = 0;  // computed and pushed
  double compute_s = 0.0;       // total time in train_step
  double delay_s = 0.0;         // total injected straggler delay
  double wait_s = 0.0;          // total time waiting for parameters
};

WorkerResult run_worker(const WorkerSetup& setup);

}  // namespace syncopt::worker
