// The backend factory and the CPU backend (oneDNN). The one place that knows
// whether this build has CUDA (DESIGN.md §5, STYLE.md "one #if in one factory").
#include "nn/backend.hpp"

#include <omp.h>

#include "comm/mpi.hpp"
#include "common/error.hpp"
#include "nn/cpu_network.hpp"

#if SYNCOPT_HAS_CUDA
#include "syncopt_cuda/api.hpp"
#endif

namespace syncopt::nn {

namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : m_threads(threads) {}
  std::string name() const override { return "cpu"; }
  std::unique_ptr<Network> make_network(const ModelSpec& spec, int max_batch) override {
    return std::make_unique<cpu::CpuNetwork>(cpu::net_spec(spec), max_batch, m_threads);
  }

 private:
  int m_threads;
};

}  // namespace

// threads: OpenMP threads of the compute (0 = leave the OpenMP default).
std::unique_ptr<Backend> make_backend(const std::string& name, int threads, int local_rank) {
  if (threads < 0) {
    throw ConfigError("compute.threads must be >= 0 (0 = the OpenMP default), got " +
                      std::to_string(threads));
  }
  if (name == "cpu") {
    // Set here too so that anything sized by the thread count before the
    // first step (oneDNN primitive creation) sees the same number.
    if (threads > 0) omp_set_num_threads(threads);
    return std::make_unique<CpuBackend>(threads);
  }
  if (name == "cuda") {
#if SYNCOPT_HAS_CUDA
    return cuda::make_cuda_backend(threads, cuda::pick_device(local_rank));
#else
    (void)local_rank;
    throw ConfigError(
        "compute.backend = \"cuda\" but this build has no CUDA backend; rebuild with "
        "-DSYNCOPT_WITH_CUDA=ON on a machine with the CUDA toolkit, or use compute.backend = "
        "\"cpu\"");
#endif
  }
  throw ConfigError("unknown compute.backend \"" + name + "\"; use \"cpu\" or \"cuda\"");
}

std::string describe_device(const std::string& name, int local_rank) {
  if (name != "cuda") return "cpu";
#if SYNCOPT_HAS_CUDA
  const int n = cuda::device_count();
  if (n == 0) return "cuda: no CUDA device visible (this rank would fail)";
  return "cuda:" + std::to_string(local_rank % n) + " of " + std::to_string(n) +
         " (node-local rank " + std::to_string(local_rank) + ")";
#else
  (void)local_rank;
  return "cuda: this build has no CUDA backend (this rank would fail)";
#endif
}

std::unique_ptr<DeviceAllreduce> make_device_allreduce(const std::string& name, MPI_Comm comm) {
#if SYNCOPT_HAS_CUDA
  if (name == "cuda" && cuda::nccl_usable(comm)) {
    class Nccl final : public DeviceAllreduce {
     public:
      Nccl(MPI_Comm c, int device) : m_reducer(c, device) {}
      void mean(float* host, std::size_t count) override {
        m_reducer.allreduce_mean_host(host, count);
      }

     private:
      cuda::NcclReducer m_reducer;
    };
    return std::make_unique<Nccl>(comm, cuda::pick_device(comm::node_local_rank(comm)));
  }
#else
  (void)name;
  (void)comm;
#endif
  return nullptr;
}

}  // namespace syncopt::nn
