// The CUDA backend's factories: a network for a graph on a device, and the
// nn::Backend the one factory in apps/syncopt/platform.cpp picks.
#include "common/error.hpp"
#include "cuda_network.hpp"
#include "syncopt_cuda/api.hpp"

namespace syncopt::cuda {

namespace {

class CudaBackend final : public nn::Backend {
 public:
  CudaBackend(int device, const CudaOptions& options) : m_device(device), m_options(options) {}
  std::string name() const override { return "cuda"; }
  std::unique_ptr<nn::Network> make_network(const nn::ModelSpec& spec, int max_batch) override {
    return make_cuda_network(nn::model_graph(spec), max_batch, m_device, m_options);
  }

 private:
  int m_device;
  CudaOptions m_options;
};

}  // namespace

std::unique_ptr<DeviceNetwork> make_cuda_network(const nn::Graph& graph, int max_batch, int device,
                                                 const CudaOptions& options) {
  return std::make_unique<net::CudaNetwork>(graph, max_batch, device, options);
}

std::unique_ptr<nn::Backend> make_cuda_backend(int threads, int device,
                                               const CudaOptions& options) {
  const int n = device_count();
  if (n == 0) {
    throw ConfigError("compute.backend = \"cuda\" but this process sees no CUDA device (" +
                      probe_devices().message +
                      "); run on a GPU node or use compute.backend = \"cpu\"");
  }
  if (device < 0 || device >= n) {
    throw ConfigError("CUDA device " + std::to_string(device) +
                      " does not exist; this process sees " + std::to_string(n) + " device(s)");
  }
  (void)threads;  // the host side of a step is one thread
  return std::make_unique<CudaBackend>(device, options);
}

}  // namespace syncopt::cuda
