// The compute factory (see platform.hpp): the one `#if SYNCOPT_HAS_CUDA`
// (the CUDA backend's module loader at the top, its use in make_compute).
#include "platform.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "comm/mpi.hpp"
#include "common/error.hpp"

#if SYNCOPT_HAS_CUDA
#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi.hpp"
#include "syncopt_cuda/module.hpp"

namespace syncopt::app {
namespace {

// Where the CUDA module may be: $SYNCOPT_CUDA_MODULE, else next to this
// binary, else ../lib beside it (an installed tree).
std::vector<std::string> module_paths() {
  if (const char* env = std::getenv("SYNCOPT_CUDA_MODULE"); env != nullptr && *env != '\0')
    return {env};
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec).parent_path();
  return {(exe / cuda::kModuleFile).string(), (exe / ".." / "lib" / cuda::kModuleFile).string()};
}

// The CUDA backend, loaded on first use (syncopt_cuda/module.hpp): a run on
// the CPU never maps the CUDA libraries. Loaded once and never unloaded;
// it holds no GPU state of its own.
const cuda::Module& cuda_module() {
  static const cuda::Module* loaded = [] {
    std::string why;
    for (const auto& path : module_paths()) {
      void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (handle == nullptr) {
        why += "\n  " + std::string(::dlerror());
        continue;
      }
      using Entry = const cuda::Module* (*)();
      const auto entry = reinterpret_cast<Entry>(::dlsym(handle, cuda::kModuleSymbol));
      const cuda::Module* m = entry != nullptr ? entry() : nullptr;
      if (m == nullptr || m->version != cuda::kModuleVersion || m->size != sizeof(cuda::Module)) {
        why += "\n  " + path + ": not this build's CUDA module (rebuild syncopt)";
        continue;
      }
      return m;
    }
    throw ConfigError(
        "compute.backend = \"cuda\" but the CUDA backend module could not be loaded:" + why +
        "\nit is built next to the syncopt binary (" + std::string(cuda::kModuleFile) +
        "); the CUDA runtime, cuBLAS, cuDNN and NCCL must be on the loader's path "
        "(LD_LIBRARY_PATH); SYNCOPT_CUDA_MODULE may name the module; or use compute.backend = "
        "\"cpu\"");
  }();
  return *loaded;
}

}  // namespace
}  // namespace syncopt::app
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
  const cuda::Module& cu = cuda_module();
  // The GPU this rank's backend took, so that the reducer uses the same one.
  auto rank_device = std::make_shared<int>(-1);
  cuda::CudaOptions options;
  options.sync_timeout_s = dead_after_s;
  options.precision = cc.precision;
  options.tf32 = cc.tf32;
  options.deterministic = cc.deterministic;
  train::Compute c;
  c.make_backend = [&cu, threads, options, rank_device](int local_rank) {
    *rank_device = cu.pick_device(local_rank);
    return cu.make_backend(threads, *rank_device, options);
  };
  // θ, gradient, optimiser and EMA on the device (local and allreduce).
  c.make_replica = cu.make_replica;
  c.make_reducer = [&cu, rank_device,
                    dead_after_s](MPI_Comm comm) -> std::unique_ptr<comm::Reducer> {
    // Collective: every rank takes part in each step, device or not.
    const int local_rank = comm::node_local_rank(comm);
    int device = *rank_device;
    if (device < 0) {
      try {
        device = cu.pick_device(local_rank);
      } catch (const Error&) {
        device = -1;  // nccl_plan says so, on every rank
      }
    }
    const cuda::NcclPlan plan = cu.nccl_plan(comm, device);
    if (!plan.usable) {
      int rank = 0;
      SYNCOPT_CHECK_MPI(MPI_Comm_rank(comm, &rank));
      if (rank == 0) spdlog::warn("allreduce through MPI (host memory), not NCCL: {}", plan.reason);
      return comm::make_mpi_reducer(comm);
    }
    return cu.make_nccl_reducer(comm, device, dead_after_s);
  };
  c.describe = [&cu](int local_rank) -> std::string {
    const cuda::DeviceProbe p = cu.probe_devices();
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
