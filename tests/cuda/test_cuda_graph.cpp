// The CUDA backend's layer graphs against the CPU backend, its oracle, in
// FP32 math on both sides: every layer kind on its own (convolutions of
// several kernels, strides, paddings, with and without bias and weight
// norm; batch norm on images and on vectors, with a fused ReLU; ReLU; the
// residual add with an identity shortcut, of the images, and of a tensor
// read twice; max, average and global average pooling; fc; dropout with a
// fixed key and with the batch's hash; flatten), a residual block with a
// projection shortcut, and resnet20 for a few SGD steps. Each compares the
// loss, the gradient of every parameter view, the gradient w.r.t. the
// images, and the logits of predict() -- for a graph with batch norm after
// set_batch_norm_statistics, so the precise statistics are compared
// through what they are for, for two parameter vectors (θ and θ̄) in turn.
// Tolerances are relative to each tensor's largest value: 1e-3 for one
// layer (float sums in other orders; a wrong mask, a lost contribution or a
// misplaced offset is off by tens of percent), 2e-3 for resnet20's
// 20 layers. main.cpp: SKIP (77) without a GPU.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "../common/layer_cases.hpp"
#include "nn/backend.hpp"
#include "nn/cpu_network.hpp"
#include "nn/dropout.hpp"
#include "nn/graph.hpp"
#include "optim/optimizer.hpp"
#include "syncopt_cuda/api.hpp"
#include "syncopt_cuda/memory.hpp"
#include "syncopt_cuda/sync.hpp"

namespace nn = syncopt::nn;
namespace cu = syncopt::cuda;
namespace optim = syncopt::optim;
using nn::LayerType;
using syncopt::test::add;
using syncopt::test::conv;
using syncopt::test::dropout;
using syncopt::test::fc;
using syncopt::test::graph_of;
using syncopt::test::layer;
using syncopt::test::pool;

namespace {

std::vector<float> normal_floats(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

// Distinct values in [-1, 1], shuffled: no max-pool ties on the images.
std::vector<float> distinct_floats(std::size_t n, std::uint64_t seed) {
  std::vector<float> v(n);
  const double step = 2.0 / static_cast<double>(n);
  for (std::size_t i = 0; i < n; ++i) {
    v[i] = static_cast<float>(-1.0 + step * (static_cast<double>(i) + 0.5));
  }
  std::mt19937_64 rng(seed);
  std::shuffle(v.begin(), v.end(), rng);
  return v;
}

std::vector<std::int32_t> labels_for(int batch, std::int64_t classes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> y(static_cast<std::size_t>(batch));
  for (auto& l : y) l = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(classes));
  return y;
}

// max |a - b| / max |b| over [begin, end).
double rel_err(const float* a, const float* b, std::size_t begin, std::size_t end) {
  double diff = 0.0, scale = 0.0;
  for (std::size_t i = begin; i < end; ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return scale > 0.0 ? diff / scale : diff;
}
double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  return rel_err(a.data(), b.data(), 0, a.size());
}

// Deterministic algorithms (cuDNN's heuristics, no timing): fast to plan.
std::unique_ptr<cu::DeviceNetwork> gpu_network(const nn::Graph& g, int max_batch,
                                               nn::Precision precision = nn::Precision::kFp32) {
  cu::CudaOptions opt;
  opt.deterministic = true;
  opt.precision = precision;
  return cu::make_cuda_network(g, max_batch, cu::pick_device(0), opt);
}

// Parameters as the CPU gradient checks draw them (tests/unit/test_nn.cpp):
// N(0, 0.5^2); g = ||v|| * (0.7 + 0.1 (o mod 6)); batch-norm scales 1 +
// N(0, 0.3^2); so that no gradient is trivially 0 or 1.
std::vector<float> test_params(const nn::Graph& g, std::uint64_t seed) {
  const nn::ParamLayout& layout = g.layout;
  std::vector<float> params = normal_floats(layout.count, seed, 0.5f);
  const std::vector<float> noise = normal_floats(layout.count, seed + 3, 0.1f);
  for (std::size_t vi = 0; vi < layout.views.size(); ++vi) {
    const nn::ParamView& v = layout.views[vi];
    if (v.role == nn::ParamRole::kScale) {
      for (std::size_t i = 0; i < v.count; ++i)
        params[v.offset + i] = 1.0f + 3 * noise[v.offset + i];
    }
    if (v.role != nn::ParamRole::kGain) continue;
    const nn::ParamView& dir = layout.views[vi - 1];
    const std::size_t fan_in = dir.count / v.count;
    for (std::size_t o = 0; o < v.count; ++o) {
      double ss = 0;
      for (std::size_t i = 0; i < fan_in; ++i) {
        const double a = params[dir.offset + o * fan_in + i];
        ss += a * a;
      }
      params[v.offset + o] =
          static_cast<float>(std::sqrt(ss) * (0.7 + 0.1 * static_cast<double>(o % 6)));
    }
  }
  return params;
}

struct Compare {
  int batch = 3;
  double tol = 1e-3;
  std::optional<std::uint64_t> dropout_key = 77;  // nullopt: the batch's hash
};

// One graph on both backends: training step (loss, every parameter view,
// the images' gradient), then predict (after the precise statistics of two
// parameter vectors in turn, when the graph has batch norm).
void compare_graph(const nn::Graph& g, std::uint64_t seed, const Compare& c = {}) {
  const int batch = c.batch;
  nn::cpu::CpuNetwork cpu(g, batch, 0);
  auto gpu = gpu_network(g, batch);
  cpu.set_dropout_key(c.dropout_key);
  gpu->set_dropout_key(c.dropout_key);
  const nn::ParamLayout& layout = g.layout;
  const std::vector<float> params = test_params(g, seed);
  const std::size_t per = static_cast<std::size_t>(g.input[0] * g.input[1] * g.input[2]);
  const std::size_t in_count = per * static_cast<std::size_t>(batch);
  const std::vector<float> x = distinct_floats(in_count, seed + 1);
  const auto y = labels_for(batch, g.outputs, seed + 2);

  std::vector<float> g_cpu(layout.count), g_gpu(layout.count, 123.0f);
  std::vector<float> dx_cpu(in_count), dx_gpu(in_count, 123.0f);
  const float l_cpu = cpu.train_step_with_input_grad(params.data(), x.data(), y.data(), batch,
                                                     g_cpu.data(), dx_cpu.data());
  const float l_gpu = gpu->train_step_with_input_grad(params.data(), x.data(), y.data(), batch,
                                                      g_gpu.data(), dx_gpu.data());
  CHECK(std::fabs(l_gpu - l_cpu) <= c.tol * std::max(1.0f, std::fabs(l_cpu)));
  for (const nn::ParamView& v : layout.views) {
    INFO("gradient of " << v.name);
    CHECK(rel_err(g_gpu.data(), g_cpu.data(), v.offset, v.offset + v.count) < c.tol);
  }
  {
    INFO("gradient of the images");
    CHECK(rel_err(dx_gpu, dx_cpu) < c.tol);
  }
  // The plain train_step (no input gradient) gives the same parameter gradient.
  std::vector<float> g_gpu2(layout.count);
  gpu->train_step(params.data(), x.data(), y.data(), batch, g_gpu2.data());
  CHECK(rel_err(g_gpu2, g_cpu) < c.tol);

  const std::size_t nlogits = static_cast<std::size_t>(batch * g.outputs);
  std::vector<float> z_cpu(nlogits), z_gpu(nlogits);
  if (!g.has_batch_norm) {
    cpu.predict(params.data(), x.data(), batch, z_cpu.data());
    gpu->predict(params.data(), x.data(), batch, z_gpu.data());
    CHECK(rel_err(z_gpu, z_cpu) < c.tol);
    return;
  }
  CHECK(gpu->has_batch_norm());
  CHECK_THROWS_AS(gpu->predict(params.data(), x.data(), batch, z_gpu.data()),
                  syncopt::InternalError);  // no statistics yet
  // θ and θ̄: two parameter vectors, each with its own statistics over the
  // same 3 batches.
  const int batches = 3;
  const std::vector<float> stats_x = distinct_floats(in_count * batches, seed + 4);
  std::vector<float> theta_bar = params;  // θ̄: θ moved a little
  const auto shift = normal_floats(layout.count, seed + 5, 0.2f);
  for (std::size_t i = 0; i < theta_bar.size(); ++i) theta_bar[i] += shift[i];
  std::vector<float> z_gpu_theta(nlogits);
  for (const std::vector<float>* p :
       {&params, static_cast<const std::vector<float>*>(&theta_bar)}) {
    INFO((p == &params ? "θ" : "θ̄") << ": predict after its own statistics");
    cpu.set_batch_norm_statistics(p->data(), stats_x.data(), batch, batches);
    gpu->set_batch_norm_statistics(p->data(), stats_x.data(), batch, batches);
    cpu.predict(p->data(), x.data(), batch, z_cpu.data());
    gpu->predict(p->data(), x.data(), batch, z_gpu.data());
    CHECK(rel_err(z_gpu, z_cpu) < c.tol);
    if (p == &params) z_gpu_theta = z_gpu;
  }
  // θ with θ̄'s statistics is not θ with its own: the statistics did change
  // (where they depend on the parameters: not for a batch norm of the images).
  bool depends = false;
  for (const nn::Node& n : g.nodes) {
    depends = depends || (n.type == LayerType::kBatchNorm && n.inputs[0] != nn::kGraphInput);
  }
  if (depends) {
    gpu->predict(params.data(), x.data(), batch, z_gpu.data());
    CHECK(rel_err(z_gpu, z_gpu_theta) > 1e-2);
  }
}

}  // namespace

TEST_CASE("cuda graph: each layer kind equals the CPU backend", "[cuda][graph]") {
  // Every row of the shared table of layer cases (tests/common/layer_cases.hpp),
  // the CPU backend's finite-difference cases.
  for (const syncopt::test::LayerCase& lc : syncopt::test::layer_cases()) {
    DYNAMIC_SECTION(lc.name) {
      Compare c;
      c.batch = lc.batch;
      if (lc.hash_key) c.dropout_key = std::nullopt;
      compare_graph(lc.graph, lc.seed, c);
    }
  }
}

TEST_CASE("cuda graph: a residual block with a projection shortcut equals the CPU backend",
          "[cuda][graph]") {
  // stem - bn - relu (read twice: by c1 and by the projection), a stride-2
  // branch, the 1x1 stride-2 projection + bn on the shortcut, add, relu, gap, fc.
  using T = LayerType;
  const nn::Graph g = graph_of(
      8, 5, 5,
      {conv("stem", 8, 3, 1, 1, false), layer(T::kBatchNorm), layer(T::kRelu, "in"),
       conv("c1", 16, 3, 2, 1, false), layer(T::kBatchNorm), layer(T::kRelu),
       conv("c2", 16, 3, 1, 1, false), layer(T::kBatchNorm), add("in", nn::Shortcut::kProjection),
       layer(T::kRelu), layer(T::kGlobalAvgPool), fc("f", 5)});
  bool has_proj = false;
  for (const nn::Node& n : g.nodes) has_proj = has_proj || n.name == "add9.proj";
  REQUIRE(has_proj);
  compare_graph(g, 48, {4});
}

TEST_CASE("cuda graph: dropout keeps exactly the elements nn::dropout::keep keeps",
          "[cuda][graph]") {
  // A dropout on the images: dL/dimages = keep * scale * dL/dlogits, so its
  // zeros are the dropped elements, in NCHW order over the whole batch.
  const int batch = 4;
  const nn::Graph g = graph_of(3, 5, 6, {dropout(0.4)});
  auto gpu = gpu_network(g, batch);
  const std::uint64_t key = 99;
  gpu->set_dropout_key(key);
  const std::size_t n = static_cast<std::size_t>(batch) * 3 * 5 * 6;
  const auto x = distinct_floats(n, 1);
  const auto y = labels_for(batch, g.outputs, 2);
  REQUIRE(g.layout.count == 0);
  std::vector<float> none(1), dx(n);  // no parameters: any non-null pointers
  gpu->train_step_with_input_grad(none.data(), x.data(), y.data(), batch, none.data(), dx.data());
  const std::uint64_t node_key = nn::dropout::node_key(key, 0);
  const std::uint64_t threshold = nn::dropout::threshold(0.4);
  std::size_t dropped = 0, mismatched = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const bool keep = nn::dropout::keep(node_key, i, threshold);
    dropped += keep ? 0 : 1;
    mismatched += (dx[i] != 0.0f) == keep ? 0 : 1;
  }
  CHECK(mismatched == 0);
  CHECK(dropped > n / 4);
}

TEST_CASE("cuda graph: resnet20 follows the CPU backend for a few SGD steps", "[cuda][graph]") {
  // Fashion-MNIST's shape (28 -> 14 -> 7: odd sizes at the last projection),
  // the host-pointer path on both, SGD with momentum; then the precise
  // statistics of the trained θ and predict.
  nn::ModelSpec spec;
  spec.model = nn::Builtin::kResnet20;
  const nn::Graph g = nn::model_graph(spec);
  const int batch = 16, steps = 4;
  std::vector<float> init(g.layout.count);
  nn::init_params(g, init.data(), 5);
  const auto images = normal_floats(std::size_t{28 * 28} * batch * steps, 6, 0.5f);
  const auto labels = labels_for(batch * steps, 10, 7);
  nn::cpu::CpuNetwork cpu(g, batch, 0);
  auto gpu = gpu_network(g, batch);
  auto train = [&](nn::Network& net, std::vector<float>& losses) {
    std::vector<float> p = init, grad(g.layout.count);
    optim::OptimizerOptions opt;
    optim::Optimizer sgd(opt, g.layout.count);
    for (int s = 0; s < steps; ++s) {
      const float* x = images.data() + std::size_t{28 * 28} * batch * s;
      losses.push_back(net.train_step(p.data(), x, labels.data() + batch * s, batch, grad.data()));
      sgd.step(p.data(), grad.data(), 0.05f);
    }
    return p;
  };
  std::vector<float> loss_cpu, loss_gpu;
  const auto p_cpu = train(cpu, loss_cpu);
  const auto p_gpu = train(*gpu, loss_gpu);
  for (int s = 0; s < steps; ++s) {
    INFO("step " << s << ": cpu loss " << loss_cpu[s] << ", cuda loss " << loss_gpu[s]);
    CHECK(std::fabs(loss_gpu[s] - loss_cpu[s]) <= 2e-3f * std::max(1.0f, loss_cpu[s]));
  }
  for (const nn::ParamView& v : g.layout.views) {
    INFO("θ after " << steps << " steps: " << v.name);
    CHECK(rel_err(p_gpu.data(), p_cpu.data(), v.offset, v.offset + v.count) < 2e-3);
  }
  cpu.set_batch_norm_statistics(p_cpu.data(), images.data(), batch, steps);
  gpu->set_batch_norm_statistics(p_cpu.data(), images.data(), batch, steps);
  std::vector<float> z_cpu(static_cast<std::size_t>(batch) * 10), z_gpu(z_cpu.size());
  cpu.predict(p_cpu.data(), images.data(), batch, z_cpu.data());
  gpu->predict(p_cpu.data(), images.data(), batch, z_gpu.data());
  CHECK(rel_err(z_gpu, z_cpu) < 2e-3);
}

TEST_CASE("cuda graph: one host wait per device step with batch norm and dropout",
          "[cuda][graph]") {
  // The dropout key is hashed on the host from the host batch and batch norm
  // keeps its statistics on the device: neither adds a wait to the step.
  using T = LayerType;
  const nn::Graph g =
      graph_of(1, 12, 12,
               {conv("c", 8, 3, 2, 1, false), layer(T::kBatchNorm), layer(T::kRelu, "r"),
                conv("c2", 8, 3, 1, 1, false), layer(T::kBatchNorm), add("r"), layer(T::kRelu),
                dropout(0.2), layer(T::kGlobalAvgPool), fc("f", 10)});
  const int batch = 8;
  auto gpu = gpu_network(g, batch);
  std::vector<float> params(g.layout.count);
  nn::init_params(g, params.data(), 3);
  cu::DeviceBuffer<float> d_params(params.size()), d_grad(params.size());
  SYNCOPT_CHECK_CUDA(
      cudaMemcpy(d_params.get(), params.data(), d_params.nbytes(), cudaMemcpyHostToDevice));
  SYNCOPT_CHECK_CUDA(cudaDeviceSynchronize());
  const auto x = normal_floats(std::size_t{144} * batch, 4);
  const auto y = labels_for(batch, 10, 5);
  bool finite = false;
  gpu->train_step_device(d_params.get(), x.data(), y.data(), batch, d_grad.get(), &finite);
  for (int s = 0; s < 2; ++s) {
    const std::uint64_t waits = cu::host_wait_count();
    gpu->train_step_device(d_params.get(), x.data(), y.data(), batch, d_grad.get(), &finite);
    CHECK(cu::host_wait_count() - waits == 1);
    CHECK(finite);
  }
}

namespace {

// Hooks that log the offsets asked for and reported, and at each report
// copy the gradient's final range, so that a bucket reported before its
// values are in the caller's buffer shows.
class RecordingHooks final : public nn::StepHooks {
 public:
  RecordingHooks(std::size_t count, const float* grad) : StepHooks(count), m_grad(grad) {}
  void need_params(std::size_t offset, std::size_t count) override {
    log.push_back("need " + std::to_string(offset) + "+" + std::to_string(count));
  }
  void grads_ready(std::size_t offset, float loss) override {
    log.push_back("ready " + std::to_string(offset));
    seen.assign(m_grad + offset, m_grad + param_count());
    at_ready.push_back({offset, seen});
    losses.push_back(loss);
  }
  std::vector<std::string> log;
  std::vector<float> seen, losses;
  std::vector<std::pair<std::size_t, std::vector<float>>> at_ready;

 private:
  const float* m_grad;
};

}  // namespace

TEST_CASE("cuda graph: the staged step equals train_step and asks as the CPU backend does",
          "[cuda][graph][staged]") {
  // ResNet-20 at 8x8 (batch norm, projections, shared gradient buffers) and
  // the reference CNN; deterministic algorithms, so that the two steps can
  // be compared bit for bit (the staged path changes when bytes move, not
  // which kernels run).
  for (const nn::Builtin b : {nn::Builtin::kResnet20, nn::Builtin::kCnn}) {
    nn::ModelSpec spec;
    spec.model = b;
    if (b == nn::Builtin::kResnet20) spec.height = spec.width = 8;
    const nn::Graph g = nn::model_graph(spec);
    DYNAMIC_SECTION(g.name) {
      const int batch = 4;
      auto gpu = gpu_network(g, batch);
      nn::cpu::CpuNetwork cpu(g, batch, 0);
      std::vector<float> params(g.layout.count);
      nn::init_params(g, params.data(), 9);
      const std::size_t per = static_cast<std::size_t>(g.input[0] * g.input[1] * g.input[2]);
      const auto x = normal_floats(per * batch, 10);
      const auto y = labels_for(batch, g.outputs, 11);
      std::vector<float> whole(g.layout.count), staged(g.layout.count, 7.0f),
          cpu_grad(g.layout.count);
      const float l_whole = gpu->train_step(params.data(), x.data(), y.data(), batch, whole.data());
      RecordingHooks hooks(g.layout.count, staged.data());
      const float l_staged =
          gpu->train_step_staged(params.data(), x.data(), y.data(), batch, staged.data(), hooks);
      CHECK(l_staged == l_whole);
      CHECK(staged == whole);  // bit for bit: the same kernels on the same inputs
      // Each report saw its range final.
      for (const auto& [offset, values] : hooks.at_ready) {
        INFO("bucket at " << offset);
        CHECK(std::equal(values.begin(), values.end(), whole.begin() + offset));
      }
      for (const float l : hooks.losses) CHECK(l == l_whole);
      RecordingHooks cpu_hooks(g.layout.count, cpu_grad.data());
      cpu.train_step_staged(params.data(), x.data(), y.data(), batch, cpu_grad.data(), cpu_hooks);
      CHECK(hooks.log == cpu_hooks.log);
    }
  }
}

namespace {

// ||a - b||_2 / ||b||_2 over [begin, end).
double rel_l2(const std::vector<float>& a, const std::vector<float>& b, std::size_t begin,
              std::size_t end) {
  double diff = 0.0, norm = 0.0;
  for (std::size_t i = begin; i < end; ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    diff += d * d;
    norm += static_cast<double>(b[i]) * b[i];
  }
  return norm > 0.0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

}  // namespace

TEST_CASE("cuda graph: bf16 follows the CPU backend's bf16", "[cuda][graph][bf16]") {
  // Both backends in bf16 (tensor cores with FP32 accumulation; oneDNN with
  // FP32 accumulation) on every row of the shared table. Each is within
  // 4 u (nodes + 1) of FP32 in the relative 2-norm (tests/unit/test_nn.cpp,
  // u = 2^-8), so the two are within twice that of each other. A GPU host
  // whose CPU has no AVX-512 cannot run the CPU side in bf16
  // (nn::cpu_runs_bf16): the GPU's bf16 is then held to the CPU's FP32,
  // within the same bound, so it is still checked.
  const nn::Precision cpu_precision =
      nn::cpu_runs_bf16() ? nn::Precision::kBf16 : nn::Precision::kFp32;
  INFO("the CPU side in " << (cpu_precision == nn::Precision::kBf16 ? "bf16" : "FP32"));
  for (const syncopt::test::LayerCase& lc : syncopt::test::layer_cases()) {
    DYNAMIC_SECTION(lc.name) {
      const nn::Graph& g = lc.graph;
      const int batch = lc.batch;
      nn::cpu::CpuNetwork cpu(g, batch, 0, cpu_precision);
      auto gpu = gpu_network(g, batch, nn::Precision::kBf16);
      const std::optional<std::uint64_t> key =
          lc.hash_key ? std::nullopt : std::optional<std::uint64_t>(77);
      cpu.set_dropout_key(key);
      gpu->set_dropout_key(key);
      const std::vector<float> params = test_params(g, lc.seed);
      const std::size_t in_count =
          static_cast<std::size_t>(g.input[0] * g.input[1] * g.input[2]) * batch;
      const std::vector<float> x = distinct_floats(in_count, lc.seed + 1);
      const auto y = labels_for(batch, g.outputs, lc.seed + 2);
      std::vector<float> g_cpu(g.layout.count), g_gpu(g.layout.count), dx_cpu(in_count),
          dx_gpu(in_count);
      const float l_cpu = cpu.train_step_with_input_grad(params.data(), x.data(), y.data(), batch,
                                                         g_cpu.data(), dx_cpu.data());
      const float l_gpu = gpu->train_step_with_input_grad(params.data(), x.data(), y.data(), batch,
                                                          g_gpu.data(), dx_gpu.data());
      const double tol = 8.0 / 256.0 * (static_cast<double>(g.nodes.size()) + 1.0);
      CHECK(std::fabs(l_gpu - l_cpu) <= tol * std::max(1.0f, std::fabs(l_cpu)));
      for (const nn::ParamGroup& grp : g.groups) {
        const double e = rel_l2(g_gpu, g_cpu, grp.offset, grp.offset + grp.count);
        INFO(grp.name << ": " << e << " of tolerance " << tol);
        CHECK(e <= tol);
      }
      const double e = rel_l2(dx_gpu, dx_cpu, 0, in_count);
      INFO("images: " << e << " of tolerance " << tol);
      CHECK(e <= tol);
    }
  }
}
