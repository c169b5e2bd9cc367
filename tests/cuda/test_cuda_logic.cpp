// The decisions of cuda/ that need no GPU, run everywhere (label unit): how
// a cudaGetDeviceCount result is read (no driver / no device = none; a
// driver too old = an error, never "no device"), when NCCL can serve the
// ranks of a node (distinct GPU UUIDs, never device counts vs ranks), and
// how the bias-gradient reduction is cut into blocks (enough of them to
// fill an H200, within the scratch the network allocates), and how the
// backward pass of a layer graph delivers gradients (overwrite, add, share).
#define CATCH_CONFIG_MAIN
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "nn/graph.hpp"
#include "syncopt_cuda/api.hpp"
#include "syncopt_cuda/gradient_plan.hpp"
#include "syncopt_cuda/kernels.hpp"

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

int node_id(const syncopt::nn::Graph& g, const std::string& name) {
  for (std::size_t j = 0; j < g.nodes.size(); ++j) {
    if (g.nodes[j].name == name) return static_cast<int>(j);
  }
  FAIL("no node " << name);
  return -1;
}

// The invariants of a gradient plan: every reader of a tensor contributes
// once; the first contribution in backward order (the highest node, slot 0
// before slot 1) overwrites or shares, every later one adds; only an add's
// input 0 that nothing else reads shares, and then it uses the add's buffer;
// the images take contributions only when their gradient is wanted.
void check_plan(const syncopt::nn::Graph& g, bool input_grad) {
  using cu::Delivery;
  const cu::GradientPlan p = cu::plan_gradients(g, input_grad);
  REQUIRE(p.into.size() == g.nodes.size());
  REQUIRE(p.buffer.size() == g.nodes.size());
  std::vector<int> seen(g.nodes.size(), 0);
  int input_seen = 0;
  for (std::size_t j = g.nodes.size(); j-- > 0;) {
    const syncopt::nn::Node& n = g.nodes[j];
    for (std::size_t slot = 0; slot < 2; ++slot) {
      const Delivery d = p.into[j][slot];
      INFO("node " << n.name << " slot " << slot);
      if (slot >= n.inputs.size()) {
        CHECK(d == Delivery::kNone);
        continue;
      }
      const int id = n.inputs[slot];
      if (id == syncopt::nn::kGraphInput) {
        if (!input_grad) {
          CHECK(d == Delivery::kNone);
        } else {
          CHECK(d == (input_seen++ == 0 ? Delivery::kWrite : Delivery::kAccumulate));
        }
        continue;
      }
      const auto k = static_cast<std::size_t>(id);
      if (seen[k]++ == 0) {
        CHECK((d == Delivery::kWrite || d == Delivery::kShared));
      } else {
        CHECK(d == Delivery::kAccumulate);
      }
      if (d == Delivery::kShared) {
        CHECK(n.type == syncopt::nn::LayerType::kAdd);
        CHECK(slot == 0);
        CHECK(g.consumers_count[k] == 1);
        CHECK(p.buffer[k] == p.buffer[j]);
      }
    }
  }
  for (std::size_t k = 0; k < g.nodes.size(); ++k) {
    INFO("node " << g.nodes[k].name);
    CHECK(seen[k] == g.consumers_count[k]);
    // Every node's buffer is owned by the node itself or a later one that owns it.
    const int b = p.buffer[k];
    CHECK(b >= static_cast<int>(k));
    CHECK(p.buffer[static_cast<std::size_t>(b)] == b);
  }
}

}  // namespace

TEST_CASE("plan_gradients: sums for tensors read twice, shared buffers for lone add inputs",
          "[cuda][logic]") {
  namespace nn = syncopt::nn;
  using cu::Delivery;
  nn::ModelSpec spec;
  spec.model = nn::Builtin::kResnet20;
  const nn::Graph r20 = nn::model_graph(spec);
  for (const bool input_grad : {false, true}) {
    check_plan(r20, input_grad);
    spec.model = nn::Builtin::kCnn;
    check_plan(nn::model_graph(spec), input_grad);
  }
  const cu::GradientPlan p = cu::plan_gradients(r20, false);
  // An identity block (s1b2): the add shares its buffer with bn2 and hands
  // the block's input (s1b1.out, read by s1b2.conv1 too) its first
  // contribution; conv1's backward-data adds the second.
  const int add = node_id(r20, "s1b2.add"), conv1 = node_id(r20, "s1b2.conv1");
  const int bn2 = node_id(r20, "s1b2.bn2"), in = node_id(r20, "s1b1.add");
  CHECK(r20.nodes[static_cast<std::size_t>(add)].inputs == std::vector<int>{bn2, in});
  CHECK(p.into[static_cast<std::size_t>(add)][0] == Delivery::kShared);
  CHECK(p.buffer[static_cast<std::size_t>(bn2)] == add);
  CHECK(p.into[static_cast<std::size_t>(add)][1] == Delivery::kWrite);
  CHECK(p.into[static_cast<std::size_t>(conv1)][0] == Delivery::kAccumulate);
  // A projection block (s2b1): the shortcut's batch norm gets a copy (input
  // 1 never shares); the block's input is read by the projection (later in
  // the node list: first in backward) and by conv1.
  const int padd = node_id(r20, "s2b1.add"), proj = node_id(r20, "s2b1.add.proj");
  const int proj_bn = node_id(r20, "s2b1.add.proj_bn"), pconv1 = node_id(r20, "s2b1.conv1");
  CHECK(r20.nodes[static_cast<std::size_t>(padd)].inputs[1] == proj_bn);
  CHECK(p.into[static_cast<std::size_t>(padd)][0] == Delivery::kShared);
  CHECK(p.into[static_cast<std::size_t>(padd)][1] == Delivery::kWrite);
  CHECK(p.buffer[static_cast<std::size_t>(proj_bn)] == proj_bn);
  CHECK(p.into[static_cast<std::size_t>(proj)][0] == Delivery::kWrite);
  CHECK(p.into[static_cast<std::size_t>(pconv1)][0] == Delivery::kAccumulate);
  // The stem conv reads the images: nothing unless their gradient is wanted.
  CHECK(p.into[0][0] == Delivery::kNone);
  CHECK(cu::plan_gradients(r20, true).into[0][0] == Delivery::kWrite);

  // x + x: one tensor in both slots of an add: a write, then a sum (never shared).
  nn::GraphSpec twice;
  twice.name = "twice";
  twice.channels = 2;
  twice.height = twice.width = 3;
  twice.classes = 0;
  nn::LayerDesc c;
  c.type = nn::LayerType::kConv;
  c.name = "c";
  c.out = 2;
  c.pad = 1;
  nn::LayerDesc a;
  a.type = nn::LayerType::kAdd;
  a.from = "c";
  twice.layers = {c, a};
  const nn::Graph tg = nn::build_graph(twice);
  check_plan(tg, true);
  const cu::GradientPlan tp = cu::plan_gradients(tg, true);
  CHECK(tp.into[1][0] == Delivery::kWrite);
  CHECK(tp.into[1][1] == Delivery::kAccumulate);
  CHECK(tp.buffer[0] == 0);
  // An add of the images: its input 1 takes the images' first contribution,
  // the conv's backward-data the second.
  a.from = "input";
  twice.layers = {c, a};
  const nn::Graph ig = nn::build_graph(twice);
  check_plan(ig, true);
  const cu::GradientPlan ip = cu::plan_gradients(ig, true);
  CHECK(ip.into[1][0] == Delivery::kShared);
  CHECK(ip.into[1][1] == Delivery::kWrite);
  CHECK(ip.into[0][0] == Delivery::kAccumulate);
}
