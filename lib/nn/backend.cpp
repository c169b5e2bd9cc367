// The backend factory and the CPU backend (oneDNN). The one place that knows
// whether this build has CUDA (DESIGN.md §5, STYLE.md "one #if in one factory").
#include "nn/backend.hpp"

#include <omp.h>

#include "common/error.hpp"
#include "nn/cpu_network.hpp"

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
std::unique_ptr<Backend> make_backend(const std::string& name, int threads) {
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
    return make_cuda_backend(threads);
#else
    throw ConfigError(
        "compute.backend = \"cuda\" but this build has no CUDA backend; rebuild with "
        "-DSYNCOPT_WITH_CUDA=ON on a machine with the CUDA toolkit, or use compute.backend = "
        "\"cpu\"");
#endif
  }
  throw ConfigError("unknown compute.backend \"" + name + "\"; use \"cpu\" or \"cuda\"");
}

}  // namespace syncopt::nn
