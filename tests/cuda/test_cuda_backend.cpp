// The CUDA backend against the CPU backend, its oracle: each hand-written
// kernel against its CPU function (lib/nn/ops.hpp, lib/nn/dropout.hpp,
// lib/optim) or its formula, each straight-line model's predict() and
// train_step() against CpuNetwork's (fc + loss: logreg; + relu: mlp; + conv
// / pool / weight norm: cnn), a few training steps on both, and the error
// paths, at small batches and at 512 (where cuDNN picks other algorithms).
// The host-pointer path (pipelined transfers) against the device-pointer
// path, for the CNN and resnet20. Layer graphs: test_cuda_graph.cpp.
// main.cpp: SKIP (77) without a GPU.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "nn/backend.hpp"
#include "nn/dropout.hpp"
#include "nn/ops.hpp"
#include "optim/optimizer.hpp"
#include "syncopt_cuda/api.hpp"
#include "syncopt_cuda/kernels.hpp"
#include "syncopt_cuda/memory.hpp"
#include "syncopt_cuda/sync.hpp"

namespace nn = syncopt::nn;
namespace cu = syncopt::cuda;
namespace optim = syncopt::optim;

namespace {

std::vector<float> normal_floats(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

std::vector<std::int32_t> labels_for(int batch, int classes, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> y(static_cast<std::size_t>(batch));
  for (auto& l : y) l = static_cast<std::int32_t>(rng() % static_cast<std::uint64_t>(classes));
  return y;
}

// max |a - b| / max |b| over [begin, end): the error relative to the
// reference's scale (robust to the reference having zeros).
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

// A plain cudaMemcpy from pageable memory may return before its DMA has
// landed, and it is ordered only with the legacy default stream: a reader on
// one of the backend's non-blocking streams could see the old contents. The
// device-wide sync makes the copy complete before anyone reads it.
template <class T>
cu::DeviceBuffer<T> to_device(const std::vector<T>& h) {
  cu::DeviceBuffer<T> d(h.size());
  SYNCOPT_CHECK_CUDA(cudaMemcpy(d.get(), h.data(), d.nbytes(), cudaMemcpyHostToDevice));
  SYNCOPT_CHECK_CUDA(cudaDeviceSynchronize());
  return d;
}
template <class T>
std::vector<T> to_host(const cu::DeviceBuffer<T>& d) {
  std::vector<T> h(d.count());
  SYNCOPT_CHECK_CUDA(cudaDeviceSynchronize());
  SYNCOPT_CHECK_CUDA(cudaMemcpy(h.data(), d.get(), d.nbytes(), cudaMemcpyDeviceToHost));
  return h;
}

std::unique_ptr<nn::Backend> gpu_backend() { return cu::make_cuda_backend(1, cu::pick_device(0)); }

}  // namespace

// ---- the hand-written kernels --------------------------------------------

TEST_CASE("cuda kernels: bias+relu forward, relu and bias backward", "[cuda][kernels]") {
  const int n = 5, c = 7, hw = 13;
  const std::size_t total = static_cast<std::size_t>(n) * c * hw;
  const auto y0 = normal_floats(total, 1), bias = normal_floats(c, 2), dy = normal_floats(total, 3);
  for (const bool relu : {false, true}) {
    std::vector<float> ref(total);
    for (std::size_t i = 0; i < total; ++i) {
      const float v = y0[i] + bias[(i / hw) % c];
      ref[i] = relu ? std::max(v, 0.0f) : v;
    }
    auto d_y = to_device(y0);
    auto d_b = to_device(bias);
    cu::bias_act_forward(d_y.get(), d_b.get(), n, c, hw, relu, nullptr);
    CHECK(rel_err(to_host(d_y), ref) < 1e-6);
  }
  std::vector<float> ref_dx(total);
  nn::ops::relu_backward(y0.data(), dy.data(), static_cast<std::int64_t>(total), ref_dx.data());
  auto d_y = to_device(y0);
  auto d_dy = to_device(dy);
  cu::DeviceBuffer<float> d_dx(total);
  cu::relu_backward(d_y.get(), d_dy.get(), total, d_dx.get(), nullptr);
  CHECK(rel_err(to_host(d_dx), ref_dx) == 0.0);

  std::vector<float> ref_db(c, 0.0f);
  for (int img = 0; img < n; ++img) {
    for (int ch = 0; ch < c; ++ch) {
      double s = 0.0;
      for (int p = 0; p < hw; ++p) s += dy[(static_cast<std::size_t>(img) * c + ch) * hw + p];
      ref_db[ch] += static_cast<float>(s);
    }
  }
  cu::DeviceBuffer<float> d_db(c);
  cu::DeviceBuffer<double> scratch(cu::bias_backward_scratch(n, c, hw));
  cu::bias_backward(d_dy.get(), n, c, hw, d_db.get(), scratch.get(), nullptr);
  CHECK(rel_err(to_host(d_db), ref_db) < 1e-5);
}

TEST_CASE("cuda kernels: residual add, accumulation, accumulating relu backward",
          "[cuda][kernels]") {
  const std::size_t n = 300007;  // not a multiple of a block
  const auto a = normal_floats(n, 101), b = normal_floats(n, 102), d0 = normal_floats(n, 103);
  auto d_a = to_device(a);
  auto d_b = to_device(b);
  cu::DeviceBuffer<float> d_y(n);
  for (const bool relu : {false, true}) {
    cu::add_act_forward(d_a.get(), d_b.get(), n, relu, d_y.get(), nullptr);
    const auto y = to_host(d_y);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < n; ++i) {
      const float want = relu ? std::max(a[i] + b[i], 0.0f) : a[i] + b[i];
      wrong += y[i] == want ? 0 : 1;
    }
    CHECK(wrong == 0);
  }
  auto d_acc = to_device(d0);
  cu::accumulate(d_acc.get(), d_a.get(), n, nullptr);
  const auto acc = to_host(d_acc);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += acc[i] == d0[i] + a[i] ? 0 : 1;
  CHECK(wrong == 0);
  // relu backward onto an earlier contribution: dx = d0 + dy * [y > 0].
  auto d_dx = to_device(d0);
  cu::relu_backward(d_a.get(), d_b.get(), n, d_dx.get(), nullptr, true);
  const auto dx = to_host(d_dx);
  wrong = 0;
  for (std::size_t i = 0; i < n; ++i) wrong += dx[i] == d0[i] + (a[i] > 0 ? b[i] : 0.0f) ? 0 : 1;
  CHECK(wrong == 0);
}

TEST_CASE("cuda kernels: dropout masks are nn::dropout::keep's, forward and backward",
          "[cuda][kernels]") {
  const std::size_t n = 300007;
  const auto x = normal_floats(n, 111), d0 = normal_floats(n, 112);
  const std::uint64_t key = nn::dropout::node_key(0x1234, 3);
  const std::uint64_t threshold = nn::dropout::threshold(0.3);
  const float scale = static_cast<float>(1.0 / 0.7);
  auto d_x = to_device(x);
  cu::DeviceBuffer<float> d_y(n);
  cu::dropout_forward(d_x.get(), n, key, threshold, scale, d_y.get(), nullptr);
  auto d_dx = to_device(d0);
  cu::dropout_backward(d_x.get(), n, key, threshold, scale, d_dx.get(), true, nullptr);
  const auto y = to_host(d_y), dx = to_host(d_dx);
  std::size_t wrong = 0, dropped = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const bool keep = nn::dropout::keep(key, i, threshold);
    dropped += keep ? 0 : 1;
    wrong += y[i] == (keep ? x[i] * scale : 0.0f) ? 0 : 1;
    wrong += dx[i] == d0[i] + (keep ? x[i] * scale : 0.0f) ? 0 : 1;
  }
  CHECK(wrong == 0);
  CHECK(std::fabs(static_cast<double>(dropped) / n - 0.3) < 0.01);
}

TEST_CASE("cuda kernels: precise batch-norm statistics over batches", "[cuda][kernels]") {
  // Per channel: the mean of the batch means and E[x^2] - mean^2 with E[x^2]
  // the mean of (var_b + mean_b^2), as the CPU backend accumulates them.
  for (const int hw : {1, 49, 300}) {
    INFO("hw " << hw);
    const int n = 7, c = 5, batches = 3;
    const std::size_t per_batch = static_cast<std::size_t>(n) * c * hw;
    auto x = normal_floats(per_batch * batches, 120 + hw, 2.0f);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] += static_cast<float>((i / hw) % c);
    std::vector<double> sum(c, 0.0), sum_sq(c, 0.0);
    cu::DeviceBuffer<double> sums(2 * static_cast<std::size_t>(c));
    SYNCOPT_CHECK_CUDA(cudaMemset(sums.get(), 0, sums.nbytes()));
    for (int b = 0; b < batches; ++b) {
      const float* xb = x.data() + b * per_batch;
      for (int ch = 0; ch < c; ++ch) {
        double m = 0.0, q = 0.0;
        for (int img = 0; img < n; ++img) {
          for (int p = 0; p < hw; ++p) m += xb[(static_cast<std::size_t>(img) * c + ch) * hw + p];
        }
        m /= static_cast<double>(n) * hw;
        for (int img = 0; img < n; ++img) {
          for (int p = 0; p < hw; ++p) {
            const double d = xb[(static_cast<std::size_t>(img) * c + ch) * hw + p] - m;
            q += d * d;
          }
        }
        q /= static_cast<double>(n) * hw;
        sum[ch] += m;
        sum_sq[ch] += q + m * m;
      }
      const std::vector<float> host(xb, xb + per_batch);
      auto d_x = to_device(host);
      cu::bn_batch_statistics(d_x.get(), n, c, hw, sums.get(), nullptr);
      SYNCOPT_CHECK_CUDA(cudaDeviceSynchronize());
    }
    cu::DeviceBuffer<float> mean(c), var(c);
    cu::bn_finish_statistics(sums.get(), c, batches, mean.get(), var.get(), nullptr);
    const auto m = to_host(mean), v = to_host(var);
    for (int ch = 0; ch < c; ++ch) {
      const double want_m = sum[ch] / batches;
      const double want_v = sum_sq[ch] / batches - want_m * want_m;
      CHECK(m[ch] == Approx(want_m).epsilon(1e-6).margin(1e-6));
      CHECK(v[ch] == Approx(want_v).epsilon(1e-5));
    }
  }
}

TEST_CASE("cuda kernels: bias gradient at the CNN's shapes and batch 1024", "[cuda][kernels]") {
  // (n, c, hw): conv1 and conv2 outputs at large batches (several chunks
  // per channel), an fc layer (hw = 1), a block-sized and an odd hw.
  struct Shape {
    int n, c, hw;
  };
  for (const Shape sh : {Shape{1024, 32, 784}, Shape{512, 64, 196}, Shape{1024, 256, 1},
                         Shape{3, 5, 256}, Shape{77, 3, 333}, Shape{1, 1, 1}}) {
    INFO("n " << sh.n << " c " << sh.c << " hw " << sh.hw);
    const std::size_t total = static_cast<std::size_t>(sh.n) * sh.c * sh.hw;
    const auto dy = normal_floats(total, 50 + sh.n);
    std::vector<double> ref(sh.c, 0.0);
    for (int img = 0; img < sh.n; ++img) {
      for (int ch = 0; ch < sh.c; ++ch) {
        for (int p = 0; p < sh.hw; ++p)
          ref[ch] += dy[(static_cast<std::size_t>(img) * sh.c + ch) * sh.hw + p];
      }
    }
    auto d_dy = to_device(dy);
    cu::DeviceBuffer<float> d_db(sh.c);
    cu::DeviceBuffer<double> scratch(cu::bias_backward_scratch(sh.n, sh.c, sh.hw));
    cu::bias_backward(d_dy.get(), sh.n, sh.c, sh.hw, d_db.get(), scratch.get(), nullptr);
    const auto db = to_host(d_db);
    for (int ch = 0; ch < sh.c; ++ch) {
      // Both sum in double: the only difference is the order.
      CHECK(std::fabs(db[ch] - ref[ch]) <= 1e-6 * std::max(1.0, std::fabs(ref[ch])));
    }
    // Deterministic: the same bits again.
    cu::DeviceBuffer<float> d_db2(sh.c);
    cu::bias_backward(d_dy.get(), sh.n, sh.c, sh.hw, d_db2.get(), scratch.get(), nullptr);
    CHECK(to_host(d_db2) == db);
  }
}

TEST_CASE("cuda kernels: weight norm forward and backward", "[cuda][kernels]") {
  const int units = 37, fan_in = 300;  // fan_in not a multiple of the block
  const std::size_t wn = static_cast<std::size_t>(units) * fan_in;
  const auto v = normal_floats(wn, 4), g = normal_floats(units, 5), dw = normal_floats(wn, 6);
  std::vector<float> w(wn), norm(units), dv(wn), dg(units);
  nn::ops::weight_norm_forward(v.data(), g.data(), units, fan_in, w.data(), norm.data());
  nn::ops::weight_norm_backward(dw.data(), v.data(), g.data(), norm.data(), units, fan_in,
                                dv.data(), dg.data());
  auto d_v = to_device(v);
  auto d_g = to_device(g);
  auto d_dw = to_device(dw);
  cu::DeviceBuffer<float> d_w(wn), d_norm(units), d_dv(wn), d_dg(units);
  cu::weight_norm_forward(d_v.get(), d_g.get(), units, fan_in, d_w.get(), d_norm.get(), nullptr);
  cu::weight_norm_backward(d_dw.get(), d_v.get(), d_g.get(), d_norm.get(), units, fan_in,
                           d_dv.get(), d_dg.get(), nullptr);
  CHECK(rel_err(to_host(d_w), w) < 1e-6);
  CHECK(rel_err(to_host(d_norm), norm) < 1e-6);
  CHECK(rel_err(to_host(d_dv), dv) < 1e-5);
  CHECK(rel_err(to_host(d_dg), dg) < 1e-5);
}

TEST_CASE("cuda kernels: softmax cross-entropy, and a bad label is flagged", "[cuda][kernels]") {
  const int batch = 300, classes = 10;
  const auto logits = normal_floats(static_cast<std::size_t>(batch) * classes, 7, 3.0f);
  auto labels = labels_for(batch, classes, 8);
  std::vector<float> dref(logits.size());
  const double ref =
      nn::ops::softmax_cross_entropy(logits.data(), labels.data(), batch, classes, dref.data());
  auto d_z = to_device(logits);
  auto d_y = to_device(labels);
  cu::DeviceBuffer<double> d_loss(batch);
  cu::DeviceBuffer<float> d_dz(logits.size());
  cu::DeviceBuffer<int> d_bad(1);
  SYNCOPT_CHECK_CUDA(cudaMemset(d_bad.get(), 0, sizeof(int)));
  cu::softmax_cross_entropy(d_z.get(), d_y.get(), batch, classes, d_loss.get(), d_dz.get(),
                            d_bad.get(), nullptr);
  const auto loss = to_host(d_loss);
  double total = 0.0;
  for (double l : loss) total += l;
  CHECK(std::fabs(total / batch - ref) < 1e-9 * std::max(1.0, ref));
  CHECK(rel_err(to_host(d_dz), dref) < 1e-6);
  CHECK(to_host(d_bad)[0] == 0);

  labels[17] = classes;  // out of range
  auto d_y2 = to_device(labels);
  cu::softmax_cross_entropy<float>(d_z.get(), d_y2.get(), batch, classes, d_loss.get(), nullptr,
                                   d_bad.get(), nullptr);
  CHECK(to_host(d_bad)[0] == 1);
}

TEST_CASE("cuda kernels: SGD, RMSProp and EMA equal syncopt::optim bit for bit",
          "[cuda][kernels][optim]") {
  // Same inputs, same order of float operations, no FMA contraction on
  // either side: the results must be identical, not merely close.
  const std::size_t n = 100003;
  for (const char* name : {"sgd", "rmsprop"}) {
    DYNAMIC_SECTION(name) {
      optim::OptimizerOptions opt;
      opt.name = *syncopt::config::enum_from_name<syncopt::config::OptimizerName>(name);
      opt.momentum = 0.9;
      opt.rms_decay = 0.9;
      opt.eps = 1e-8;
      opt.weight_decay = 1e-4;
      optim::Optimizer cpu(opt, n);
      auto p_cpu = normal_floats(n, 10);
      auto d_p = to_device(p_cpu);
      cu::DeviceBuffer<float> d_mom(n), d_ms(n);
      SYNCOPT_CHECK_CUDA(cudaMemset(d_mom.get(), 0, d_mom.nbytes()));
      cu::fill(d_ms.get(), n, 1.0f, nullptr);  // TF starts the mean square at 1
      for (int step = 0; step < 5; ++step) {
        const auto grad = normal_floats(n, 20 + step);
        const float lr = 0.05f / static_cast<float>(step + 1);
        cpu.step(p_cpu.data(), grad.data(), lr);
        auto d_g = to_device(grad);
        const auto mu = static_cast<float>(opt.momentum), wd = static_cast<float>(opt.weight_decay);
        if (opt.name == syncopt::config::OptimizerName::kSgd) {
          cu::sgd_step(d_p.get(), d_g.get(), d_mom.get(), n, lr, mu, wd, nullptr);
        } else {
          cu::rmsprop_step(d_p.get(), d_g.get(), d_ms.get(), d_mom.get(), n, lr,
                           static_cast<float>(opt.rms_decay), mu, static_cast<float>(opt.eps), wd,
                           nullptr);
        }
      }
      CHECK(to_host(d_p) == p_cpu);
      CHECK(to_host(d_mom) == cpu.momentum_buffer());
    }
  }
  const auto p0 = normal_floats(n, 30);
  optim::Ema ema(0.999, p0.data(), n);
  auto d_avg = to_device(p0);
  for (std::uint64_t t = 0; t < 20; ++t) {
    const auto p = normal_floats(n, 40 + t);
    ema.update(p.data());
    auto d_pt = to_device(p);
    cu::ema_update(d_avg.get(), d_pt.get(), n, cu::ema_alpha(0.999, t), nullptr);
  }
  const auto avg = to_host(d_avg);
  CHECK(std::equal(avg.begin(), avg.end(), ema.data()));
}

TEST_CASE("cuda kernels: the non-finite flag", "[cuda][kernels]") {
  const std::size_t n = 1 << 20;
  auto x = normal_floats(n, 60);
  cu::DeviceBuffer<int> flag(1);
  auto check = [&](const std::vector<float>& v) {
    auto d = to_device(v);
    SYNCOPT_CHECK_CUDA(cudaMemset(flag.get(), 0, sizeof(int)));
    cu::flag_nonfinite(d.get(), v.size(), flag.get(), nullptr);
    return to_host(flag)[0];
  };
  CHECK(check(x) == 0);
  x[n - 1] = std::numeric_limits<float>::infinity();
  CHECK(check(x) == 1);
  x[n - 1] = 0.0f;
  x[12345] = std::numeric_limits<float>::quiet_NaN();
  CHECK(check(x) == 1);
  x[12345] = -std::numeric_limits<float>::max();  // large but finite
  CHECK(check(x) == 0);
}

// ---- whole models against the CPU backend --------------------------------

namespace {

struct ModelCase {
  const char* label;
  nn::ModelSpec spec;
  int batch;
};

std::vector<ModelCase> model_cases() {
  std::vector<ModelCase> cases;
  nn::ModelSpec s;
  s.model = syncopt::nn::Builtin::kLogreg;
  s.weight_norm = false;
  cases.push_back({"logreg (fc + loss)", s, 33});
  s.model = syncopt::nn::Builtin::kMlp;
  s.mlp_hidden = 64;
  cases.push_back({"mlp (fc + relu)", s, 16});
  s.weight_norm = true;
  cases.push_back({"mlp with weight norm", s, 16});
  s.model = syncopt::nn::Builtin::kCnn;
  cases.push_back({"cnn (conv, pool, weight norm)", s, 24});
  s.weight_norm = false;
  cases.push_back({"cnn without weight norm", s, 8});
  s.weight_norm = true;
  s.channels = 3;
  s.height = 15;  // odd sizes: the pools drop a row / column
  s.width = 13;
  s.classes = 7;
  cases.push_back({"cnn 3x15x13, 7 classes", s, 5});
  // The reference CNN at a large batch: cuDNN chooses other algorithms
  // (and workspaces) there than at small ones.
  nn::ModelSpec ref;
  cases.push_back({"cnn at batch 512", ref, 512});
  return cases;
}

}  // namespace

TEST_CASE("cuda backend: predict and train_step equal the CPU backend", "[cuda][model]") {
  auto cpu_backend = nn::make_cpu_backend(0);  // all cores: batch 512 on one would be slow
  auto gpu = gpu_backend();
  REQUIRE(gpu->name() == "cuda");
  for (const ModelCase& mc : model_cases()) {
    DYNAMIC_SECTION(mc.label) {
      const nn::ParamLayout layout = nn::param_layout(mc.spec);
      std::vector<float> params(layout.count);
      nn::init_params(mc.spec, layout, params.data(), 42);
      // Perturb the biases and gains so that none of them is trivially 0 / ||v||.
      const auto noise = normal_floats(layout.count, 43, 0.05f);
      for (std::size_t i = 0; i < layout.count; ++i) params[i] += noise[i];
      const std::size_t per =
          static_cast<std::size_t>(mc.spec.channels) * mc.spec.height * mc.spec.width;
      const auto images = normal_floats(per * mc.batch, 44);
      const auto labels = labels_for(mc.batch, mc.spec.classes, 45);
      auto net_cpu = cpu_backend->make_network(mc.spec, mc.batch + 3);
      auto net_gpu = gpu->make_network(mc.spec, mc.batch + 3);
      REQUIRE(net_gpu->max_batch() == mc.batch + 3);

      const std::size_t nlogits = static_cast<std::size_t>(mc.batch) * mc.spec.classes;
      std::vector<float> z_cpu(nlogits), z_gpu(nlogits);
      net_cpu->predict(params.data(), images.data(), mc.batch, z_cpu.data());
      net_gpu->predict(params.data(), images.data(), mc.batch, z_gpu.data());
      CHECK(rel_err(z_gpu, z_cpu) < 1e-4);

      std::vector<float> g_cpu(layout.count), g_gpu(layout.count, 123.0f);
      const float l_cpu =
          net_cpu->train_step(params.data(), images.data(), labels.data(), mc.batch, g_cpu.data());
      const float l_gpu =
          net_gpu->train_step(params.data(), images.data(), labels.data(), mc.batch, g_gpu.data());
      CHECK(std::fabs(l_gpu - l_cpu) <= 1e-4f * std::max(1.0f, std::fabs(l_cpu)));
      // Float sums in other orders (cuDNN's and oneDNN's algorithms): 2e-4
      // of each tensor's largest value, 5e-4 from batch 256 on (sums of
      // more terms).
      const double tol = mc.batch >= 256 ? 5e-4 : 2e-4;
      for (const nn::ParamView& v : layout.views) {
        INFO("gradient of " << v.name);
        CHECK(rel_err(g_gpu.data(), g_cpu.data(), v.offset, v.offset + v.count) < tol);
      }
      // A smaller batch reuses the buffers with another plan; grad is
      // overwritten, not accumulated.
      const int small = std::max(1, mc.batch / 3);
      net_cpu->train_step(params.data(), images.data(), labels.data(), small, g_cpu.data());
      net_gpu->train_step(params.data(), images.data(), labels.data(), small, g_gpu.data());
      CHECK(rel_err(g_gpu, g_cpu) < tol);
    }
  }
}

TEST_CASE("cuda backend: SGD training follows the CPU backend", "[cuda][model][train]") {
  nn::ModelSpec spec;  // the reference CNN with weight norm
  const int batch = 32, steps = 8;
  const nn::ParamLayout layout = nn::param_layout(spec);
  std::vector<float> init(layout.count);
  nn::init_params(spec, layout, init.data(), 7);
  // One batch, seen every step: the network can memorise it, so the loss
  // must fall.
  const auto images = normal_floats(std::size_t{28 * 28} * batch, 8, 0.5f);
  const auto labels = labels_for(batch, spec.classes, 9);
  auto train = [&](nn::Backend& backend, std::vector<float>& losses) {
    auto net = backend.make_network(spec, batch);
    std::vector<float> p = init, g(layout.count);
    optim::OptimizerOptions opt;
    optim::Optimizer sgd(opt, layout.count);
    for (int s = 0; s < steps; ++s) {
      losses.push_back(net->train_step(p.data(), images.data(), labels.data(), batch, g.data()));
      sgd.step(p.data(), g.data(), 0.05f);  // 2.32 -> 1.68 on the CPU
    }
    return p;
  };
  std::vector<float> loss_cpu, loss_gpu;
  auto cpu_backend = nn::make_cpu_backend(1);
  auto gpu = gpu_backend();
  const auto p_cpu = train(*cpu_backend, loss_cpu);
  const auto p_gpu = train(*gpu, loss_gpu);
  for (int s = 0; s < steps; ++s) {
    INFO("step " << s << ": cpu loss " << loss_cpu[s] << ", cuda loss " << loss_gpu[s]);
    CHECK(std::fabs(loss_gpu[s] - loss_cpu[s]) <= 1e-3f * std::max(1.0f, loss_cpu[s]));
  }
  CHECK(rel_err(p_gpu, p_cpu) < 1e-3);
  CHECK(loss_gpu.back() < 0.9f * loss_gpu.front());  // it learns
}

TEST_CASE("cuda backend: errors", "[cuda][errors]") {
  auto gpu = gpu_backend();
  nn::ModelSpec spec;
  spec.model = syncopt::nn::Builtin::kMlp;
  auto net = gpu->make_network(spec, 4);
  const nn::ParamLayout layout = nn::param_layout(spec);
  std::vector<float> params(layout.count, 0.01f), grad(layout.count);
  std::vector<float> images(5 * 28 * 28, 0.5f);
  std::vector<std::int32_t> labels = {0, 1, 2, 3, 4};
  CHECK_THROWS_AS(net->train_step(params.data(), images.data(), labels.data(), 5, grad.data()),
                  syncopt::InternalError);
  labels[2] = 10;
  CHECK_THROWS_AS(net->train_step(params.data(), images.data(), labels.data(), 4, grad.data()),
                  syncopt::DataError);
  labels[2] = 2;  // the network is usable after a data error
  CHECK(
      std::isfinite(net->train_step(params.data(), images.data(), labels.data(), 4, grad.data())));
  CHECK_THROWS_AS(gpu->make_network(spec, 0), syncopt::ConfigError);
  CHECK_THROWS_AS(cu::make_cuda_backend(1, cu::device_count()), syncopt::ConfigError);
  CHECK(cu::pick_device(cu::device_count()) == 0);
}

TEST_CASE("cuda backend: the pipelined host path equals the device path bit for bit",
          "[cuda][model]") {
  // One network, deterministic algorithms: train_step with host pointers
  // (transfers overlapped with compute, node by node) must give exactly
  // the gradient of train_step_device on the same parameters, at several
  // batches, and predict the same logits: for the CNN and for resnet20
  // (batch norm, residual adds, projections; 65 parameter groups).
  cu::CudaOptions opt;
  opt.deterministic = true;
  auto gpu = cu::make_cuda_backend(1, cu::pick_device(0), opt);
  nn::ModelSpec cnn, resnet20;
  resnet20.model = nn::Builtin::kResnet20;
  for (const nn::ModelSpec& spec : {cnn, resnet20}) {
    DYNAMIC_SECTION(spec.name()) {
      const nn::ParamLayout layout = nn::param_layout(spec);
      auto net = gpu->make_network(spec, 512);
      auto* dnet = dynamic_cast<cu::DeviceNetwork*>(net.get());
      REQUIRE(dnet != nullptr);
      std::vector<float> params(layout.count);
      nn::init_params(spec, layout, params.data(), 3);
      auto d_params = to_device(params);
      for (const int batch : {1, 32, 512}) {
        INFO("batch " << batch);
        const auto images = normal_floats(std::size_t{28 * 28} * batch, 70 + batch);
        const auto labels = labels_for(batch, spec.classes, 71 + batch);
        std::vector<float> g_host(layout.count);
        const float l_host =
            net->train_step(params.data(), images.data(), labels.data(), batch, g_host.data());
        cu::DeviceBuffer<float> d_grad(layout.count);
        bool finite = false;
        const float l_dev = dnet->train_step_device(d_params.get(), images.data(), labels.data(),
                                                    batch, d_grad.get(), &finite);
        CHECK(l_host == l_dev);
        CHECK(finite);
        CHECK(to_host(d_grad) == g_host);
        // Again with other parameters through the host path: nothing stale.
        std::vector<float> p2 = params;
        for (float& p : p2) p *= 1.01f;
        std::vector<float> g2(layout.count), g3(layout.count);
        net->train_step(p2.data(), images.data(), labels.data(), batch, g2.data());
        net->train_step(params.data(), images.data(), labels.data(), batch, g3.data());
        CHECK(g3 == g_host);
        CHECK(g2 != g_host);
        if (net->has_batch_norm()) {
          net->set_batch_norm_statistics(params.data(), images.data(), batch, 1);
        }
        std::vector<float> z1(static_cast<std::size_t>(batch) * spec.classes), z2(z1.size());
        net->predict(params.data(), images.data(), batch, z1.data());
        net->predict(params.data(), images.data(), batch, z2.data());
        CHECK(z1 == z2);
      }
    }
  }
}

TEST_CASE("cuda backend: the device step reads a non-finite gradient back with the loss",
          "[cuda][model]") {
  // One wait per step: train_step_device's loss read-back also says whether
  // the gradient it wrote is finite. A NaN in one weight makes it non-finite;
  // the next healthy step clears the flag (it is per step, not sticky).
  auto gpu = gpu_backend();
  nn::ModelSpec spec;
  spec.model = syncopt::nn::Builtin::kMlp;
  const nn::ParamLayout layout = nn::param_layout(spec);
  auto net = gpu->make_network(spec, 8);
  auto* dnet = dynamic_cast<cu::DeviceNetwork*>(net.get());
  REQUIRE(dnet != nullptr);
  std::vector<float> params(layout.count);
  nn::init_params(spec, layout, params.data(), 81);
  const auto images = normal_floats(std::size_t{28 * 28} * 8, 82);
  const auto labels = labels_for(8, spec.classes, 83);
  cu::DeviceBuffer<float> d_grad(layout.count);
  auto step = [&](const std::vector<float>& p) {
    auto d_p = to_device(p);
    bool finite = true;
    const std::uint64_t waits = cu::host_wait_count();
    dnet->train_step_device(d_p.get(), images.data(), labels.data(), 8, d_grad.get(), &finite);
    CHECK(cu::host_wait_count() - waits == 1);
    return finite;
  };
  CHECK(step(params));
  std::vector<float> bad = params;
  bad[layout.find("fc1.v").offset + 5] = std::numeric_limits<float>::quiet_NaN();
  CHECK_FALSE(step(bad));
  CHECK(step(params));
}
