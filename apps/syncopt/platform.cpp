// The compute factory (see platform.hpp): the one `#if SYNCOPT_HAS_CUDA`.
#include "platform.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "comm/mpi.hpp"
#include "common/error.hpp"

#if SYNCOPT_HAS_CUDA
#include <spdlog/spdlog.h>

#include <memory>

#include "comm/mpi.hpp"
#include "syncopt_cuda/api.hpp"
#endif

namespace syncopt::app {

namespace {

// The CPUs this process may run on (its affinity mask: what mpirun, srun or
// taskset gave it), at least 1.
int usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
}

}  // namespace

int capped_threads(int threads) {
  const int cpus = usable_cpus();
  if (threads <= cpus) return threads;
  // OpenMP would start them all and crash past what the system allows (a
  // segfault at 100000); more threads than CPUs only compete for them.
  std::fprintf(stderr,
               "syncopt: compute.threads = %d is more than the %d CPU(s) this process may use "
               "(on %s): using %d\n",
               threads, cpus, comm::host_name().c_str(), cpus);
  return cpus;
}

train::Compute make_compute(const config::ComputeConfig& cc, double dead_after_s) {
  int threads = capped_threads(static_cast<int>(cc.threads));
  if (cc.backend == config::Backend::kCpu) {
    // Validates threads and precision now, not on the first rank that computes.
    nn::make_cpu_backend(threads, cc.precision);
    return train::cpu_compute(threads, cc.precision);
  }
#if SYNCOPT_HAS_CUDA
  // The GPU this rank's backend took, so that the reducer uses the same one.
  auto rank_device = std::make_shared<int>(-1);
  cuda::CudaOptions options;
  options.sync_timeout_s = dead_after_s;
  options.precision = cc.precision;
  options.tf32 = cc.tf32;
  options.deterministic = cc.deterministic;
  train::Compute c;
  c.make_backend = [threads, options, rank_device](int local_rank) {
    *rank_device = cuda::pick_device(local_rank);
    return cuda::make_cuda_backend(threads, *rank_device, options);
  };
  // θ, gradient, optimiser and EMA on the device (local and allreduce).
  c.make_replica = cuda::make_cuda_replica;
  c.make_reducer = [rank_device, dead_after_s](MPI_Comm comm) -> std::unique_ptr<comm::Reducer> {
    // Collective: every rank takes part in each step, device or not.
    const int local_rank = comm::node_local_rank(comm);
    int device = *rank_device;
    if (device < 0) {
      try {
        device = cuda::pick_device(local_rank);
      } catch (const Error&) {
        device = -1;  // nccl_plan says so, on every rank
      }
    }
    const cuda::NcclPlan plan = cuda::nccl_plan(comm, device);
    if (!plan.usable) {
      int rank = 0;
      SYNCOPT_CHECK_MPI(MPI_Comm_rank(comm, &rank));
      if (rank == 0) spdlog::warn("allreduce through MPI (host memory), not NCCL: {}", plan.reason);
      return comm::make_mpi_reducer(comm);
    }
    return cuda::make_nccl_reducer(comm, device, dead_after_s);
  };
  c.describe = [](int local_rank) -> std::string {
    const cuda::DeviceProbe p = cuda::probe_devices();
    if (p.status != cuda::DeviceProbe::Status::kOk) {
      return "cuda: " + p.message + " (this rank would fail)";
    }
    const int device = p.count == 1 ? 0 : local_rank % p.count;
    return "cuda:" + std::to_string(device) + " of " + std::to_string(p.count) +
           " (node-local rank " + std::to_string(local_rank) + ")";
  };
  return c;
#else
  (void)threads;
  (void)dead_after_s;
  throw ConfigError(
      "compute.backend = \"cuda\" but this build has no CUDA backend; rebuild with "
      "-DSYNCOPT_WITH_CUDA=ON on a machine with the CUDA toolkit, or use compute.backend = "
      "\"cpu\"");
#endif
}

bool built_with_cuda() { return SYNCOPT_HAS_CUDA != 0; }

}  // namespace syncopt::app
