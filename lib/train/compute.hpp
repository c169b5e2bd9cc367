// How a rank gets its compute, handed to the trainers by the app: the
// backend that runs the model, the replica that holds a whole model's
// training state, and the reducer that averages gradients in allreduce mode. lib/ only knows the
// CPU ones; the one factory that also knows CUDA lives in apps/syncopt/platform.cpp, so lib/ never
// depends on cuda/.
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>

#include "comm/reducer.hpp"
#include "nn/backend.hpp"
#include "replica/replica.hpp"

namespace syncopt::train {

struct Compute {
  // The backend of a rank; `local_rank` (this rank's index on its node)
  // picks the GPU where there are several.
  std::function<std::unique_ptr<nn::Backend>(int local_rank)> make_backend;
  // A collective over `comm`: a device reducer (NCCL) when every rank can
  // use one, MPI otherwise.
  std::function<std::unique_ptr<comm::Reducer>(MPI_Comm comm)> make_reducer;
  // The replica (θ, gradient, optimiser, EMA) of a rank that trains the
  // whole model, on `net` of this compute's backend (local, allreduce).
  std::function<std::unique_ptr<replica::Replica>(
      nn::Network& net, const float* init, std::size_t count, const replica::ReplicaOptions& opt)>
      make_replica;
  // Where a rank with this node-local rank computes, for --dry-run.
  std::function<std::string(int local_rank)> describe;
};

// CPU compute with `threads` OpenMP threads per rank in `precision`, MPI
// reductions.
Compute cpu_compute(int threads, nn::Precision precision = nn::Precision::kFp32);

}  // namespace syncopt::train
