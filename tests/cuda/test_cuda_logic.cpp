// The decisions of cuda/ that need no GPU, run everywhere (label unit): how
// a cudaGetDeviceCount result is read (no driver / no device = none; a
// driver too old = an error, never "no device"), when NCCL can serve the
// ranks of a node (distinct GPU UUIDs, never device counts vs ranks), and
// how the bias-gradient reduction is cut into blocks (enough of them to
// fill an H200, within the scratch the network allocates), and the order
// in which the staged step asks for parameters and reports gradients.
#define CATCH_CONFIG_MAIN
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "nn/graph.hpp"
#include "syncopt_cuda/api.hpp"
#include "syncopt_cuda/kernels.hpp"
#include "syncopt_cuda/staged.hpp"

namespace cu = syncopt::cuda;
using Status = cu::DeviceProbe::Status;

TEST_CASE("classify_probe: no driver and no device are none, an old driver is an error",
          "[cuda][logic]") {
  const auto ok = cu::classify_probe(cudaSuccess, "", 2, 13000, 13000);
  CHECK(ok.status == Status::kOk);
  CHECK(ok.count == 2);
  const auto none = cu::classify_probe(cudaErrorNoDevice, "cudaErrorNoDevice", 0, 13000, 13000);
  CHECK(none.status == Status::kNone);
  CHECK(none.count == 0);
  // No libcuda at all: the runtime says "insufficient driver", the driver
  // version is 0. That is "no GPU here" (a CPU machine).
  const auto no_driver =
      cu::classify_probe(cudaErrorInsufficientDriver, "cudaErrorInsufficientDriver", 0, 0, 13000);
  CHECK(no_driver.status == Status::kNone);
  CHECK(no_driver.message.find("no NVIDIA driver") != std::string::npos);
  // A driver that is there but older than the runtime: reported as it is.
  const auto old = cu::classify_probe(cudaErrorInsufficientDriver,
                                      "cudaErrorInsufficientDriver: CUDA driver version is "
                                      "insufficient for CUDA runtime version",
                                      0, 12020, 13000);
  CHECK(old.status == Status::kError);
  CHECK(old.message.find("12.2") != std::string::npos);
  CHECK(old.message.find("13.0") != std::string::npos);
  CHECK(old.message.find("update the driver") != std::string::npos);
  const auto broken =
      cu::classify_probe(cudaErrorSystemNotReady, "cudaErrorSystemNotReady", 0, 13000, 13000);
  CHECK(broken.status == Status::kError);
  CHECK(broken.message.find("cudaErrorSystemNotReady") != std::string::npos);
}

TEST_CASE("nccl_node_problem: distinct UUIDs per rank, whatever the device numbers",
          "[cuda][logic]") {
  // SLURM --gpus-per-task=1: four ranks, each sees one GPU as device 0, all
  // different. Usable, although the node has "1 device" per rank.
  std::vector<cu::RankDevice> per_task;
  for (int r = 0; r < 4; ++r) {
    per_task.push_back(
        {r, "n1", true, "GPU-" + std::to_string(r), "0000:0" + std::to_string(r) + ":00.0", ""});
  }
  CHECK(cu::nccl_node_problem(per_task).empty());
  // Four ranks on a one-GPU machine: the same UUID four times.
  std::vector<cu::RankDevice> shared;
  for (int r = 0; r < 4; ++r) shared.push_back({r, "h200", true, "GPU-aaaa", "0000:1b:00.0", ""});
  const std::string why = cu::nccl_node_problem(shared);
  CHECK(why.find("ranks 0, 1, 2, 3") != std::string::npos);
  CHECK(why.find("GPU-aaaa") != std::string::npos);
  // A rank without a device.
  std::vector<cu::RankDevice> missing = per_task;
  missing[2].has_device = false;
  missing[2].problem = "no CUDA device";
  CHECK(cu::nccl_node_problem(missing).find("rank 2") != std::string::npos);
  // Two of four share.
  std::vector<cu::RankDevice> two = per_task;
  two[3].uuid = two[1].uuid;
  CHECK(cu::nccl_node_problem(two).find("ranks 1, 3") != std::string::npos);
  CHECK(cu::nccl_node_problem({}).empty());
}

TEST_CASE("bias_backward_shape: the reduction fills the GPU and fits its scratch",
          "[cuda][logic]") {
  struct Shape {
    int n, c, hw;
  };
  // The reference CNN's layers (conv1 32 x 28 x 28, conv2 64 x 14 x 14, fc1
  // 256, fc2 10) at the benchmark's batches, and odd sizes.
  for (const int n : {1, 2, 32, 33, 128, 512, 1000, 1024, 4096}) {
    for (const Shape sh : {Shape{n, 32, 784}, Shape{n, 64, 196}, Shape{n, 256, 1}, Shape{n, 10, 1},
                           Shape{n, 1, 1}, Shape{n, 3, 333}}) {
      INFO("n " << sh.n << " c " << sh.c << " hw " << sh.hw);
      const cu::BiasBackwardShape b = cu::bias_backward_shape(sh.n, sh.c, sh.hw);
      // The chunks tile the batch: none empty, none missing.
      CHECK(b.chunks >= 1);
      CHECK(static_cast<long long>(b.chunks) * b.per_chunk >= sh.n);
      CHECK(static_cast<long long>(b.chunks - 1) * b.per_chunk < sh.n);
      // The scratch sized for the network's largest batch holds every chunk.
      CHECK(cu::bias_backward_scratch(4096, sh.c, sh.hw) >=
            static_cast<std::size_t>(b.chunks) * static_cast<std::size_t>(sh.c));
      CHECK(cu::bias_backward_scratch(sh.n, sh.c, sh.hw) >=
            static_cast<std::size_t>(b.chunks) * static_cast<std::size_t>(sh.c));
    }
  }
  // fc1's bias gradient at batch 512 and 1024 spreads over at least as many
  // blocks as an H200 has multiprocessors (132); one thread per channel
  // walking the batch was a single block.
  for (const int n : {512, 1024, 4096}) {
    INFO("fc1 at batch " << n);
    CHECK(cu::bias_backward_shape(n, 256, 1).blocks >= 132);
  }
  CHECK(cu::bias_backward_shape(1024, 32, 784).blocks >= 132);  // conv1
  CHECK(cu::bias_backward_shape(0, 256, 1).blocks == 0);
}

namespace {

// A device for syncopt::cuda::staged_step that logs each operation, and
// checks what the staged step promises: a layer's forward only after its
// parameters are uploaded, a bucket reported only once every gradient group
// at or above its offset is on the host.
class LogDevice {
 public:
  LogDevice(const syncopt::nn::Graph& g, std::vector<std::string>& log)
      : m_g(g), m_log(log), m_up(g.nodes.size(), false), m_host(g.nodes.size(), false) {}
  void upload(std::size_t j) {
    m_up[j] = true;
    m_log.push_back("upload " + m_g.nodes[j].name);
  }
  void forward(std::size_t j) {
    if (m_g.nodes[j].param_count > 0) CHECK(m_up[j]);
    m_log.push_back("forward " + m_g.nodes[j].name);
  }
  void loss() { m_log.push_back("loss"); }
  void backward(std::size_t j) { m_log.push_back("backward " + m_g.nodes[j].name); }
  void download(std::size_t j) { m_log.push_back("download " + m_g.nodes[j].name); }
  float wait_loss() {
    m_log.push_back("wait_loss");
    return 1.5f;
  }
  void wait_download(std::size_t j) {
    m_host[j] = true;
    m_log.push_back("wait_download " + m_g.nodes[j].name);
  }
  void finish() { m_log.push_back("finish"); }
  // Every group at or above `offset` is on the host.
  bool on_host_from(std::size_t offset) const {
    for (std::size_t j = 0; j < m_g.nodes.size(); ++j) {
      const auto& n = m_g.nodes[j];
      if (n.param_count > 0 && n.param_offset >= offset && !m_host[j]) return false;
    }
    return true;
  }

 private:
  const syncopt::nn::Graph& m_g;
  std::vector<std::string>& m_log;
  std::vector<bool> m_up, m_host;
};

class CheckHooks final : public syncopt::nn::StepHooks {
 public:
  CheckHooks(std::size_t count, std::vector<std::string>& log, const LogDevice*& device)
      : StepHooks(count), m_log(log), m_device(device) {}
  void need_params(std::size_t offset, std::size_t count) override {
    m_log.push_back("need " + std::to_string(offset) + "+" + std::to_string(count));
  }
  void grads_ready(std::size_t offset, float loss) override {
    CHECK(loss == 1.5f);
    CHECK(m_device->on_host_from(offset));
    m_log.push_back("ready " + std::to_string(offset));
  }

 private:
  std::vector<std::string>& m_log;
  const LogDevice*& m_device;
};

}  // namespace

TEST_CASE("staged_step: parameters asked before each upload, buckets only once on the host",
          "[cuda][logic]") {
  namespace nn = syncopt::nn;
  nn::ModelSpec spec;
  spec.model = nn::Builtin::kResnet20;
  const nn::Graph g = nn::model_graph(spec);
  std::vector<std::string> log;
  LogDevice device(g, log);
  const LogDevice* dev = &device;
  CheckHooks hooks(g.layout.count, log, dev);
  CHECK(cu::staged_step(g, hooks, device) == 1.5f);
  // The expected sequence: forward with each group asked for, uploaded, run;
  // the loss; backward with each group's download enqueued after its node;
  // the loss read back; then the groups, top first, waited for and reported.
  std::vector<std::string> want;
  for (const nn::Node& n : g.nodes) {
    if (n.param_count > 0) {
      want.push_back("need " + std::to_string(n.param_offset) + "+" +
                     std::to_string(n.param_count));
      want.push_back("upload " + n.name);
    }
    want.push_back("forward " + n.name);
  }
  want.push_back("loss");
  for (std::size_t j = g.nodes.size(); j-- > 0;) {
    want.push_back("backward " + g.nodes[j].name);
    if (g.nodes[j].param_count > 0) want.push_back("download " + g.nodes[j].name);
  }
  want.push_back("wait_loss");
  for (std::size_t j = g.nodes.size(); j-- > 0;) {
    if (g.nodes[j].param_count == 0) continue;
    want.push_back("wait_download " + g.nodes[j].name);
    want.push_back("ready " + std::to_string(g.nodes[j].param_offset));
  }
  want.push_back("finish");
  CHECK(log == want);
}
