// The CUDA backend as a module (libsyncopt_cuda_backend.so, built next to
// the syncopt binary): the functions the compute factory
// (apps/syncopt/platform.cpp) calls, in one table that the module's one
// exported symbol returns. The factory loads the module only when
// compute.backend = "cuda", so a CPU run maps none of the CUDA runtime,
// cuBLAS, cuDNN or NCCL (about 230 MB; below about 1 GB of address space a
// CPU run could not even start when the binary linked them).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>

#include "syncopt_cuda/api.hpp"

namespace syncopt::cuda {

// Bumped whenever the table changes; the factory refuses a module of
// another version (a stale file next to a new binary).
inline constexpr int kModuleVersion = 1;
inline constexpr const char* kModuleSymbol = "syncopt_cuda_module";
inline constexpr const char* kModuleFile = "libsyncopt_cuda_backend.so";

struct Module {
  int version = kModuleVersion;
  std::size_t size = sizeof(Module);
  DeviceProbe (*probe_devices)() noexcept = nullptr;
  int (*pick_device)(int local_rank) = nullptr;
  std::unique_ptr<nn::Backend> (*make_backend)(int threads, int device,
                                               const CudaOptions& options) = nullptr;
  std::unique_ptr<replica::Replica> (*make_replica)(
      nn::Network& net, const float* init, std::size_t count,
      const replica::ReplicaOptions& options) = nullptr;
  NcclPlan (*nccl_plan)(MPI_Comm comm, int device) = nullptr;
  std::unique_ptr<DeviceReducer> (*make_nccl_reducer)(MPI_Comm comm, int device,
                                                      double timeout_s) = nullptr;
};

}  // namespace syncopt::cuda

// The module's table (static storage; the module is never unloaded).
extern "C" const syncopt::cuda::Module* syncopt_cuda_module();
