// The CPU backend (oneDNN), the reference every other backend is checked
// against (see backend.hpp).
#include <omp.h>

#include "common/error.hpp"
#include "nn/backend.hpp"
#include "nn/cpu_network.hpp"
#include "nn/graph.hpp"

namespace syncopt::nn {

namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int threads) : m_threads(threads) {}
  std::string name() const override { return "cpu"; }
  std::unique_ptr<Network> make_network(const ModelSpec& spec, int max_batch) override {
    return std::make_unique<cpu::CpuNetwork>(model_graph(spec), max_batch, m_threads);
  }

 private:
  int m_threads;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int threads) {
  if (threads < 0) {
    throw ConfigError("compute.threads must be >= 0 (0 = the OpenMP default), got " +
                      std::to_string(threads));
  }
  // Set here too so that anything sized by the thread count before the
  // first step (oneDNN primitive creation) sees the same number.
  if (threads > 0) omp_set_num_threads(threads);
  return std::make_unique<CpuBackend>(threads);
}

}  // namespace syncopt::nn
