// Tests of lib/nn: parameter layout and init, every layer's backward against
// central finite differences (layer by layer through CpuNetwork on one-layer
// nets, the hand-written ops in double precision, and the whole models),
// predict/train_step consistency, determinism and an SGD sanity run.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "../common/layer_cases.hpp"
#include "../common/skip.hpp"
#include "common/bf16.hpp"
#include "common/error.hpp"
#include "nn/backend.hpp"
#include "nn/cpu_network.hpp"
#include "nn/dropout.hpp"
#include "nn/graph.hpp"
#include "nn/ops.hpp"
#include "platform.hpp"

namespace nn = syncopt::nn;
namespace app = syncopt::app;
using nn::LayerType;
using syncopt::test::add;
using syncopt::test::conv;
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

// Distinct values spread over all of [-1, 1], shuffled, spaced 2/n apart
// (and never 0), so that on small inputs a finite-difference step of 1e-3
// never changes a max-pool argmax or a ReLU sign, and both signs occur (a
// spacing capped at 0.02 once left the 36 inputs of the relu and gelu cases
// all negative: their backward was checked on zeros).
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

// Loss in double from the float network's logits (inference mode).
double loss_of(nn::Network& net, const std::vector<float>& params, const std::vector<float>& x,
               const std::vector<std::int32_t>& y, int batch, std::int64_t classes) {
  std::vector<float> logits(static_cast<std::size_t>(batch * classes));
  net.predict(params.data(), x.data(), batch, logits.data());
  std::vector<double> z(logits.begin(), logits.end());
  return nn::ops::softmax_cross_entropy<double>(z.data(), y.data(), batch, classes, nullptr);
}

struct FdResult {
  int checked = 0, failed = 0;
  double worst = 0.0;      // worst |fd - g| / (atol + rtol |g|)
  double worst_abs = 0.0;  // worst |fd - g|
  std::string first_failure;
};

// Central differences on entries `idx` of `values` (params or input), the
// loss evaluated by `loss()` (accumulated in double); compares with `grad`.
// An entry that fails with step eps is retried with eps/5 (absolute
// tolerance x5 for the larger rounding noise): in a whole network some ReLU
// / max-pool kink is always within reach of some step, and a kink crossed at
// eps is rarely crossed at eps/5, whereas a wrong gradient fails at both.
template <class LossFn>
FdResult check_entries(std::vector<float>& values, const std::vector<float>& grad,
                       const std::vector<std::size_t>& idx, float eps, double atol, double rtol,
                       LossFn&& loss, const std::string& what) {
  FdResult r;
  for (std::size_t i : idx) {
    const double g = grad[i];
    double best = 1e300, best_fd = 0.0, best_abs = 0.0;
    for (const double scale : {1.0, 5.0}) {
      const float e = static_cast<float>(eps / scale);
      const float saved = values[i];
      values[i] = saved + e;
      const double lp = loss();
      values[i] = saved - e;
      const double lm = loss();
      values[i] = saved;
      // The step actually taken in float.
      const double h = static_cast<double>(saved + e) - static_cast<double>(saved - e);
      const double fd = (lp - lm) / h;
      const double ratio = std::abs(fd - g) / (atol * scale + rtol * std::abs(g));
      if (ratio < best) {
        best = ratio;
        best_fd = fd;
        best_abs = std::abs(fd - g);
      }
      if (best <= 1.0) break;
    }
    r.worst = std::max(r.worst, best);
    r.worst_abs = std::max(r.worst_abs, best_abs);
    ++r.checked;
    if (best > 1.0 && r.failed++ == 0) {
      r.first_failure = what + "[" + std::to_string(i) + "]: analytic " + std::to_string(g) +
                        " vs finite difference " + std::to_string(best_fd);
    }
  }
  return r;
}

// Some random entries of [begin, begin+count) plus the `top` entries of
// largest |grad| (where a wrong gradient is most visible above the noise).
std::vector<std::size_t> pick(std::size_t begin, std::size_t count, const std::vector<float>& grad,
                              int random, int top, std::uint64_t seed) {
  std::vector<std::size_t> idx;
  std::mt19937_64 rng(seed);
  for (int k = 0; k < random && count > 0; ++k) idx.push_back(begin + rng() % count);
  std::vector<std::size_t> all(count);
  std::iota(all.begin(), all.end(), begin);
  const std::size_t t = std::min<std::size_t>(static_cast<std::size_t>(top), count);
  std::partial_sort(
      all.begin(), all.begin() + static_cast<std::ptrdiff_t>(t), all.end(),
      [&](std::size_t a, std::size_t b) { return std::abs(grad[a]) > std::abs(grad[b]); });
  idx.insert(idx.end(), all.begin(), all.begin() + static_cast<std::ptrdiff_t>(t));
  return idx;
}

struct NetCheck {
  double atol = 2e-4, rtol = 2e-2;
  float eps = 1e-3f;
  bool input_grad = true;
  bool model_init = false;  // init_params (+ small random biases) instead of N(0, 0.5^2)
  int random = 6, top = 4;
  // A deep network with batch norm: a step of any parameter moves every
  // example's pre-activations a little (the batch statistics couple them),
  // so some ReLU kink is crossed even at eps/5 for a few entries. There a
  // small share of entries may miss the tolerance, each by at most
  // `max_ratio`; a wrong gradient misses it on most entries of its tensor.
  double max_fail_share = 0.0, max_ratio = 1.0;
};

// The parameters of a gradient check: N(0, 0.5^2), or init_params of the
// graph; then g = ||v|| * (0.7 + 0.1 (o mod 6)), batch-norm scales 1 +
// N(0, 0.3^2) and, for model inits, small random biases and shifts, so that
// no gradient is trivially 0 or 1.
std::vector<float> check_params(const nn::Graph& graph, std::uint64_t seed, bool model_init) {
  const nn::ParamLayout& layout = graph.layout;
  std::vector<float> params = normal_floats(layout.count, seed, 0.5f);
  const std::vector<float> noise = normal_floats(layout.count, seed + 3, 0.1f);
  if (model_init) {
    nn::init_params(graph, params.data(), seed);
    for (const nn::ParamView& v : layout.views) {
      if (v.role == nn::ParamRole::kBias || v.role == nn::ParamRole::kShift) {
        for (std::size_t i = 0; i < v.count; ++i) params[v.offset + i] = noise[v.offset + i];
      }
    }
  }
  for (std::size_t vi = 0; vi < layout.views.size(); ++vi) {
    const nn::ParamView& v = layout.views[vi];
    if (v.role == nn::ParamRole::kScale) {
      for (std::size_t i = 0; i < v.count; ++i)
        params[v.offset + i] = 1.0f + 3 * noise[v.offset + i];
    }
    if (v.role != nn::ParamRole::kGain) continue;  // g = ||v|| like init_params
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

// Gradient check of a graph on a small batch, in training mode (batch
// statistics; dropout with a fixed key): every parameter view and
// (optionally) the input, against central differences of train_loss.
// Parameters: N(0, 0.5^2), or init_params of the graph; then g = ||v|| *
// (0.7 + 0.1 (o mod 6)), batch-norm scales 1 + N(0, 0.3^2) and, for model
// inits, small random biases and shifts, so that no gradient is trivially 0
// or 1.
void check_graph(const nn::Graph& graph, int batch, std::uint64_t seed, const std::string& kind,
                 const NetCheck& opt = {}) {
  nn::cpu::CpuNetwork net(graph, batch, 1);
  net.set_dropout_key(seed * 7 + 1);
  const nn::ParamLayout& layout = net.layout();
  const std::int64_t classes = graph.outputs;
  std::vector<float> params = check_params(graph, seed, opt.model_init);
  const std::size_t in_count =
      static_cast<std::size_t>(batch) *
      static_cast<std::size_t>(graph.input[0] * graph.input[1] * graph.input[2]);
  std::vector<float> x = distinct_floats(in_count, seed + 1);
  const auto y = labels_for(batch, classes, seed + 2);
  std::vector<float> grad(layout.count), dx(in_count);
  const float loss0 = opt.input_grad
                          ? net.train_step_with_input_grad(params.data(), x.data(), y.data(), batch,
                                                           grad.data(), dx.data())
                          : net.train_step(params.data(), x.data(), y.data(), batch, grad.data());
  CHECK(static_cast<double>(loss0) ==
        Approx(net.train_loss(params.data(), x.data(), y.data(), batch)).epsilon(1e-6));
  auto loss = [&] { return net.train_loss(params.data(), x.data(), y.data(), batch); };
  double worst = 0.0, worst_abs = 0.0;
  int checked = 0, failed = 0;
  for (const nn::ParamView& v : layout.views) {
    const auto idx = pick(v.offset, v.count, grad, opt.random, opt.top, seed + v.offset);
    const FdResult r = check_entries(params, grad, idx, opt.eps, opt.atol, opt.rtol, loss, v.name);
    INFO(v.name << ": worst error/tolerance " << r.worst << "; " << r.first_failure);
    worst = std::max(worst, r.worst);
    worst_abs = std::max(worst_abs, r.worst_abs);
    checked += r.checked;
    failed += r.failed;
    if (opt.max_fail_share == 0.0) {
      CHECK(r.failed == 0);
    } else {
      CHECK(r.worst <= opt.max_ratio);
    }
  }
  INFO(failed << " of " << checked << " parameter entries missed the tolerance");
  CHECK(failed <= opt.max_fail_share * checked);
  if (opt.input_grad) {
    const auto idx = pick(0, in_count, dx, opt.random, opt.top, seed + 7);
    const FdResult r = check_entries(x, dx, idx, opt.eps, opt.atol, opt.rtol, loss, "input");
    INFO("input: worst error/tolerance " << r.worst << "; " << r.first_failure);
    worst = std::max(worst, r.worst);
    worst_abs = std::max(worst_abs, r.worst_abs);
    CHECK(r.failed == 0);
  }
  // The table of the worst error / tolerance and worst |fd - analytic| per
  // layer kind: SYNCOPT_NN_VERBOSE=1 syncopt_unit "[nn]" | grep "gradient check"
  if (std::getenv("SYNCOPT_NN_VERBOSE") != nullptr) {
    WARN("gradient check " << kind << ": " << worst << " " << worst_abs);
  }
}

nn::ModelSpec model(const std::string& name, bool wn) {
  nn::ModelSpec s;
  const auto it = std::find_if(nn::kBuiltinNames.begin(), nn::kBuiltinNames.end(),
                               [&](const auto& e) { return e.second == name; });
  REQUIRE(it != nn::kBuiltinNames.end());
  s.model = it->first;
  s.weight_norm = wn;
  return s;
}

// The error of a model description, or "" when it builds.
std::string graph_error(std::int64_t c, std::int64_t h, std::int64_t w,
                        std::vector<nn::LayerDesc> layers, std::int64_t classes = 10) {
  try {
    graph_of(c, h, w, std::move(layers), classes);
  } catch (const syncopt::ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("param layout: counts, order, contiguity for 1x28x28", "[nn]") {
  // cnn: conv1 32*1*9 + 32 + 32 = 352, conv2 64*32*9 + 64 + 64 = 18560,
  //      fc1 256*3136 + 256 + 256 = 803328, fc2 10*256 + 10 + 10 = 2580.
  CHECK(nn::param_layout(model("cnn", true)).count == 824820);
  CHECK(nn::param_layout(model("cnn", false)).count == 824458);
  CHECK(nn::param_layout(model("mlp", true)).count == 101908);  // 128 hidden
  CHECK(nn::param_layout(model("mlp", false)).count == 101770);
  CHECK(nn::param_layout(model("logreg", true)).count == 7860);
  CHECK(nn::param_layout(model("logreg", false)).count == 7850);

  const nn::ParamLayout cnn = nn::param_layout(model("cnn", true));
  std::vector<std::string> names;
  std::size_t next = 0;
  for (const nn::ParamView& v : cnn.views) {
    names.push_back(v.name);
    CHECK(v.offset == next);
    std::size_t prod = 1;
    for (auto d : v.shape) prod *= static_cast<std::size_t>(d);
    CHECK(prod == v.count);
    next = v.offset + v.count;
  }
  CHECK(next == cnn.count);
  CHECK(names == std::vector<std::string>{"conv1.v", "conv1.g", "conv1.b", "conv2.v", "conv2.g",
                                          "conv2.b", "fc1.v", "fc1.g", "fc1.b", "fc2.v", "fc2.g",
                                          "fc2.b"});
  CHECK(cnn.find("conv2.v").shape == std::vector<std::int64_t>{64, 32, 3, 3});
  CHECK(cnn.find("fc1.v").shape == std::vector<std::int64_t>{256, 3136});
  CHECK(nn::param_layout(model("cnn", false)).find("fc2.w").shape ==
        std::vector<std::int64_t>{10, 256});
  CHECK_THROWS_AS(cnn.find("conv3.v"), syncopt::InternalError);

  nn::ModelSpec cifar = model("cnn", true);
  cifar.channels = 3;
  cifar.height = cifar.width = 32;
  CHECK(nn::param_layout(cifar).find("fc1.v").shape == std::vector<std::int64_t>{256, 4096});

  const std::string summary = nn::model_summary(model("cnn", true));
  CHECK(summary.find("total: 824820 params") != std::string::npos);
  CHECK(summary.find("conv2") != std::string::npos);
}

TEST_CASE("init_params: deterministic, He scale, g = ||v||, zero bias", "[nn]") {
  const nn::ModelSpec spec = model("cnn", true);
  const nn::ParamLayout layout = nn::param_layout(spec);
  std::vector<float> a(layout.count), b(layout.count), c(layout.count);
  nn::init_params(spec, layout, a.data(), 42);
  nn::init_params(spec, layout, b.data(), 42);
  nn::init_params(spec, layout, c.data(), 43);
  CHECK(a == b);
  CHECK(a != c);
  // Golden values: a change of the generator (which would change every
  // run's starting point, and break resuming / comparing runs) is noticed.
  CHECK(a[layout.find("conv1.v").offset] == Approx(-0.507784963).epsilon(1e-6));
  CHECK(a[layout.find("conv1.v").offset + 1] == Approx(-0.606256127).epsilon(1e-6));
  // The classifier's directions are drawn at LeCun scale times 0.1.
  CHECK(a[layout.find("fc2.v").offset] ==
        Approx(0.0804888904 * 0.1 / std::sqrt(2.0)).epsilon(1e-6));

  for (const std::string layer : {"conv1", "conv2", "fc1", "fc2"}) {
    const nn::ParamView& v = layout.find(layer + ".v");
    const nn::ParamView& g = layout.find(layer + ".g");
    const nn::ParamView& bias = layout.find(layer + ".b");
    const std::size_t fan_in = v.count / g.count;
    double ss_all = 0;
    for (std::size_t o = 0; o < g.count; ++o) {
      double ss = 0;
      for (std::size_t i = 0; i < fan_in; ++i) {
        const double x = a[v.offset + o * fan_in + i];
        ss += x * x;
      }
      ss_all += ss;
      CHECK(a[g.offset + o] == Approx(std::sqrt(ss)).epsilon(1e-5));
      CHECK(a[bias.offset + o] == 0.0f);
    }
    const double std_dev = std::sqrt(ss_all / static_cast<double>(v.count));
    INFO(layer);
    const double expected = layer == "fc2" ? 0.1 * std::sqrt(1.0 / static_cast<double>(fan_in))
                                           : std::sqrt(2.0 / static_cast<double>(fan_in));
    CHECK(std_dev == Approx(expected).epsilon(0.15));
  }
  std::vector<float> small(10);
  CHECK_THROWS_AS(nn::init_params(model("mlp", true), layout, small.data(), 1),
                  syncopt::InternalError);
}

TEST_CASE("weight norm forward/backward vs finite differences (double)", "[nn]") {
  const std::int64_t units = 3, fan_in = 5;
  std::vector<double> v(units * fan_in), g(units), c(units * fan_in);
  std::mt19937_64 rng(3);
  std::normal_distribution<double> nd;
  for (double& x : v) x = nd(rng);
  for (double& x : g) x = 0.5 + std::abs(nd(rng));
  for (double& x : c) x = nd(rng);
  // L = sum(c * w(v, g)), so dL/dw = c.
  auto loss = [&] {
    std::vector<double> w(v.size()), norm(units);
    nn::ops::weight_norm_forward(v.data(), g.data(), units, fan_in, w.data(), norm.data());
    double s = 0;
    for (std::size_t i = 0; i < w.size(); ++i) s += c[i] * w[i];
    return s;
  };
  std::vector<double> w(v.size()), norm(units), dv(v.size()), dg(units);
  nn::ops::weight_norm_forward(v.data(), g.data(), units, fan_in, w.data(), norm.data());
  for (std::int64_t o = 0; o < units; ++o) {
    double n2 = 0;
    for (std::int64_t i = 0; i < fan_in; ++i) n2 += w[o * fan_in + i] * w[o * fan_in + i];
    CHECK(std::sqrt(n2) == Approx(g[o]).epsilon(1e-12));  // ||w_o|| = g_o
  }
  nn::ops::weight_norm_backward(c.data(), v.data(), g.data(), norm.data(), units, fan_in, dv.data(),
                                dg.data());
  const double h = 1e-6;
  for (std::size_t i = 0; i < v.size(); ++i) {
    const double s = v[i];
    v[i] = s + h;
    const double lp = loss();
    v[i] = s - h;
    const double lm = loss();
    v[i] = s;
    CHECK(dv[i] == Approx((lp - lm) / (2 * h)).epsilon(1e-6).margin(1e-9));
  }
  for (std::size_t o = 0; o < g.size(); ++o) {
    const double s = g[o];
    g[o] = s + h;
    const double lp = loss();
    g[o] = s - h;
    const double lm = loss();
    g[o] = s;
    CHECK(dg[o] == Approx((lp - lm) / (2 * h)).epsilon(1e-6).margin(1e-9));
  }
}

TEST_CASE("softmax cross-entropy and relu vs finite differences (double)", "[nn]") {
  const int batch = 3, classes = 4;
  std::vector<double> z = {1.0, -2.0, 0.5, 3.0, 100.0, 101.0, 99.0, 100.5, 0, 0, 0, 0};
  const std::vector<std::int32_t> y = {3, 0, 2};
  std::vector<double> dz(z.size());
  const double loss0 =
      nn::ops::softmax_cross_entropy(z.data(), y.data(), batch, classes, dz.data());
  // Row 3 is uniform: its loss is log(4). Large logits must not overflow.
  CHECK(std::isfinite(loss0));
  const double h = 1e-6;
  for (std::size_t i = 0; i < z.size(); ++i) {
    const double s = z[i];
    z[i] = s + h;
    const double lp =
        nn::ops::softmax_cross_entropy<double>(z.data(), y.data(), batch, classes, nullptr);
    z[i] = s - h;
    const double lm =
        nn::ops::softmax_cross_entropy<double>(z.data(), y.data(), batch, classes, nullptr);
    z[i] = s;
    CHECK(dz[i] == Approx((lp - lm) / (2 * h)).epsilon(1e-6).margin(1e-9));
  }
  std::vector<double> uniform(4, 0.0);
  const std::int32_t label = 1;
  CHECK(nn::ops::softmax_cross_entropy<double>(uniform.data(), &label, 1, 4, nullptr) ==
        Approx(std::log(4.0)));
  const std::int32_t bad = 4;
  CHECK_THROWS_AS(nn::ops::softmax_cross_entropy<double>(uniform.data(), &bad, 1, 4, nullptr),
                  syncopt::DataError);

  // relu: L = sum(c * relu(x)).
  std::vector<double> x = {-1.5, -0.2, 0.3, 2.0}, c = {0.7, -1.1, 0.4, -2.0}, yv(4), dx(4);
  nn::ops::relu_forward(x.data(), 4, yv.data());
  CHECK(yv == std::vector<double>{0, 0, 0.3, 2.0});
  nn::ops::relu_backward(yv.data(), c.data(), 4, dx.data());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double s = x[i];
    auto l = [&] {
      std::vector<double> t(4);
      nn::ops::relu_forward(x.data(), 4, t.data());
      return std::inner_product(t.begin(), t.end(), c.begin(), 0.0);
    };
    x[i] = s + h;
    const double lp = l();
    x[i] = s - h;
    const double lm = l();
    x[i] = s;
    CHECK(dx[i] == Approx((lp - lm) / (2 * h)).margin(1e-9));
  }
}

TEST_CASE("layer gradients (oneDNN) vs finite differences", "[nn]") {
  using T = LayerType;
  // Every row of the shared table of layer cases (tests/common/layer_cases.hpp).
  for (const syncopt::test::LayerCase& c : syncopt::test::layer_cases()) {
    DYNAMIC_SECTION(c.name) { check_graph(c.graph, c.batch, c.seed, c.kind); }
  }
  SECTION("a flatten read by dropout stays a layer") {
    const nn::Graph g = graph_of(
        16, 3, 3,
        {conv("c", 16, 3, 1, 1), layer(T::kFlatten), syncopt::test::dropout(0.25), fc("f", 4)});
    CHECK(g.nodes[1].type == T::kFlatten);
  }
  SECTION("residual block with a projection shortcut (stride 2, 8 -> 16 channels)") {
    nn::LayerDesc a = add("in", nn::Shortcut::kProjection);
    const nn::Graph g =
        graph_of(8, 5, 5,
                 {conv("stem", 8, 3, 1, 1, false), layer(T::kBatchNorm), layer(T::kRelu, "in"),
                  conv("c1", 16, 3, 2, 1, false), layer(T::kBatchNorm), layer(T::kRelu),
                  conv("c2", 16, 3, 1, 1, false), layer(T::kBatchNorm), a, layer(T::kRelu),
                  layer(T::kGlobalAvgPool), fc("f", 5)});
    // The projection became a 1x1 stride-2 conv and a batch norm on the shortcut.
    bool has_proj = false;
    for (const nn::Node& n : g.nodes) {
      if (n.name == "add9.proj") {
        has_proj = true;
        CHECK(n.attr.kernel == 1);
        CHECK(n.attr.stride == 2);
        CHECK(n.out == std::vector<std::int64_t>{16, 3, 3});
      }
    }
    CHECK(has_proj);
    check_graph(g, 3, 46, "residual block + projection");
  }
}

namespace {

// ||a - b||_2 / ||b||_2 over [begin, end) (0 when b is 0 there and a too).
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

// A graph in bf16 against the same graph in FP32 (the oracle): the loss,
// each layer's parameter gradient (its group: weights and bias together)
// and the images' gradient, in the relative 2-norm. The tolerance comes from
// the format, not from the results: each node rounds to bf16 (unit
// roundoff u = 2^-8) its input, its weights, its output and its output's
// gradient, four roundings whose relative errors add up along the graph's
// nodes: 4 u (nodes + 1). The 2-norm, not the largest element: rounding can
// flip a max-pool's argmax or a ReLU's sign for a few elements, which moves
// those elements by their whole value but the norm by little.
double check_bf16(const nn::Graph& graph, int batch, std::uint64_t seed, bool model_init) {
  nn::cpu::CpuNetwork f32(graph, batch, 1), b16(graph, batch, 1, nn::Precision::kBf16);
  f32.set_dropout_key(seed * 7 + 1);
  b16.set_dropout_key(seed * 7 + 1);
  const std::vector<float> params = check_params(graph, seed, model_init);
  const std::size_t in_count =
      static_cast<std::size_t>(batch) *
      static_cast<std::size_t>(graph.input[0] * graph.input[1] * graph.input[2]);
  const std::vector<float> x = distinct_floats(in_count, seed + 1);
  const auto y = labels_for(batch, graph.outputs, seed + 2);
  std::vector<float> g32(graph.layout.count), g16(graph.layout.count), dx32(in_count),
      dx16(in_count);
  const float l32 = f32.train_step_with_input_grad(params.data(), x.data(), y.data(), batch,
                                                   g32.data(), dx32.data());
  const float l16 = b16.train_step_with_input_grad(params.data(), x.data(), y.data(), batch,
                                                   g16.data(), dx16.data());
  const double tol =
      4.0 * syncopt::bf16::kUnitRoundoff * (static_cast<double>(graph.nodes.size()) + 1.0);
  CHECK(std::abs(l16 - l32) <= tol * std::max(1.0f, std::abs(l32)));
  double worst = 0.0;
  for (const nn::ParamGroup& grp : graph.groups) {
    const double e = rel_l2(g16, g32, grp.offset, grp.offset + grp.count);
    INFO(grp.name << ": ||bf16 - fp32|| / ||fp32|| = " << e << ", tolerance " << tol);
    CHECK(e <= tol);
    worst = std::max(worst, e);
  }
  const double e = rel_l2(dx16, dx32, 0, in_count);
  INFO("images: ||bf16 - fp32|| / ||fp32|| = " << e << ", tolerance " << tol);
  CHECK(e <= tol);
  worst = std::max(worst, e);
  // bf16 did run: the images' gradient is not the FP32 one bit for bit.
  CHECK(dx16 != dx32);
  return worst / tol;
}

}  // namespace

TEST_CASE("bf16 gradients follow the FP32 oracle within bf16's rounding", "[nn][bf16]") {
  if (syncopt_test::skip_without_cpu_bf16(nn::cpu_runs_bf16())) return;
  for (const syncopt::test::LayerCase& c : syncopt::test::layer_cases()) {
    DYNAMIC_SECTION(c.name) {
      const double r = check_bf16(c.graph, c.batch, c.seed, false);
      if (std::getenv("SYNCOPT_NN_VERBOSE") != nullptr) WARN("bf16 " << c.kind << ": " << r);
    }
  }
  for (const char* name : {"cnn", "resnet20"}) {
    DYNAMIC_SECTION("model " << name) {
      nn::ModelSpec spec = model(name, std::string(name) == "cnn");
      if (spec.model == nn::Builtin::kResnet20) spec.height = spec.width = 8;
      const double r = check_bf16(nn::model_graph(spec), 3, 21, true);
      if (std::getenv("SYNCOPT_NN_VERBOSE") != nullptr) WARN("bf16 model " << name << ": " << r);
    }
  }
}

TEST_CASE("whole models: gradient vs finite differences", "[nn]") {
  NetCheck opt;
  opt.input_grad = false;
  opt.model_init = true;
  for (const auto& [name, wn] :
       {std::pair{"cnn", true}, std::pair{"cnn", false}, std::pair{"mlp", true},
        std::pair{"mlp", false}, std::pair{"logreg", true}}) {
    DYNAMIC_SECTION(name << (wn ? " with" : " without") << " weight norm") {
      check_graph(nn::model_graph(model(name, wn)), 3, 21, std::string("model ") + name, opt);
    }
  }
  SECTION("resnet20 on 1x8x8") {
    nn::ModelSpec spec = model("resnet20", false);
    spec.height = spec.width = 8;
    NetCheck o = opt;
    o.random = 3;
    o.top = 2;
    o.max_fail_share = 0.03;
    o.max_ratio = 4.0;
    check_graph(nn::model_graph(spec), 3, 22, "model resnet20", o);
  }
}

TEST_CASE("graph: built-ins keep the straight-line layout and groups tile it", "[nn]") {
  // The layout cnn, mlp and logreg had as straight layer lists (checkpoints
  // and params.f32 files depend on it): per conv / fc layer in order,
  // <name>.v, <name>.g, <name>.b with weight norm, <name>.w, <name>.b
  // without; conv weights OIHW, fc weights [out, in].
  using Shape = std::vector<std::int64_t>;
  struct Weighted {
    std::string name;
    Shape w;
  };
  const std::vector<Weighted> cnn_layers = {{"conv1", {32, 1, 3, 3}},
                                            {"conv2", {64, 32, 3, 3}},
                                            {"fc1", {256, 3136}},
                                            {"fc2", {10, 256}}};
  const std::vector<Weighted> mlp = {{"fc1", {128, 784}}, {"fc2", {10, 128}}};
  const std::vector<Weighted> logreg = {{"fc1", {10, 784}}};
  for (const auto& [name, wn, layers] :
       {std::tuple{"cnn", true, cnn_layers}, std::tuple{"cnn", false, cnn_layers},
        std::tuple{"mlp", true, mlp}, std::tuple{"logreg", false, logreg}}) {
    INFO(name << " weight norm " << wn);
    const nn::ModelSpec spec = model(name, wn);
    const nn::Graph g = nn::model_graph(spec);
    std::vector<std::pair<std::string, Shape>> want;
    for (const Weighted& l : layers) {
      want.emplace_back(l.name + (wn ? ".v" : ".w"), l.w);
      if (wn) want.emplace_back(l.name + ".g", Shape{l.w[0]});
      want.emplace_back(l.name + ".b", Shape{l.w[0]});
    }
    REQUIRE(g.layout.views.size() == want.size());
    std::size_t offset = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      CHECK(g.layout.views[i].name == want[i].first);
      CHECK(g.layout.views[i].shape == want[i].second);
      CHECK(g.layout.views[i].offset == offset);
      offset += g.layout.views[i].count;
    }
    CHECK(offset == g.layout.count);
    std::size_t next = 0;
    for (const nn::ParamGroup& grp : g.groups) {
      CHECK(grp.offset == next);
      next += grp.count;
    }
    CHECK(next == g.layout.count);
  }
  // cnn: every ReLU fused into the conv / fc before it; no flatten node.
  const nn::Graph cnn = nn::model_graph(model("cnn", true));
  CHECK(cnn.nodes.size() == 6);
  CHECK(cnn.nodes[0].relu);
  CHECK(cnn.groups.size() == 4);
  CHECK(cnn.groups[2].name == "fc1");
  CHECK(cnn.groups[2].count == 256 * 3136 + 256 + 256);
  // Forward FLOPs: 2 * MACs + bias + relu per output; pooling k*k per output.
  const std::int64_t conv1 = 2 * 32 * 9 * 784 + 2 * 32 * 784;
  const std::int64_t conv2 = 2 * 64 * 32 * 9 * 196 + 2 * 64 * 196;
  const std::int64_t fc1 = 2 * 256 * 3136 + 2 * 256, fc2 = 2 * 10 * 256 + 10;
  const std::int64_t pools = 32 * 196 * 4 + 64 * 49 * 4;
  CHECK(cnn.flops == conv1 + conv2 + fc1 + fc2 + pools);
}

TEST_CASE("graph: resnet20 and resnet18 sizes and shapes", "[nn]") {
  const nn::Graph r20 = nn::model_graph(model("resnet20", true));
  // 16-32-64 basic blocks, projection shortcuts (1x1 conv + bn) at the two
  // width changes: 272186 parameters (He et al.: 0.27 M).
  CHECK(r20.layout.count == 272186);
  CHECK(r20.nodes.back().out == std::vector<std::int64_t>{10});
  CHECK(r20.has_batch_norm);
  int convs = 0, projections = 0;
  for (const nn::Node& n : r20.nodes) {
    if (n.type == LayerType::kConv) ++convs;
    if (n.name.find(".proj") != std::string::npos && n.type == LayerType::kConv) {
      ++projections;
      CHECK(n.attr.stride == 2);
    }
    if (n.name == "pool") CHECK(n.in == std::vector<std::int64_t>{64, 7, 7});
  }
  CHECK(convs == 19 + 2);
  CHECK(projections == 2);
  nn::ModelSpec cifar = model("resnet20", false);
  cifar.channels = 3;
  cifar.height = cifar.width = 32;
  const nn::Graph c20 = nn::model_graph(cifar);
  CHECK(c20.layout.count == 272186 + 2 * 9 * 16);
  for (const nn::Node& n : c20.nodes) {
    if (n.name == "pool") CHECK(n.in == std::vector<std::int64_t>{64, 8, 8});
  }
  cifar.model = syncopt::nn::Builtin::kResnet18;
  const nn::Graph r18 = nn::model_graph(cifar);
  CHECK(r18.layout.count == 11173962);  // torchvision-style ResNet-18, 3x3 stem, 10 classes
}

TEST_CASE("graph: a model that does not fit is one ConfigError naming layer and shapes", "[nn]") {
  using T = LayerType;
  // Residual shapes that differ, identity shortcut: both shapes, and the fix.
  std::string e = graph_error(3, 8, 8,
                              {conv("a", 8, 3, 1, 1), conv("b", 16, 3, 2, 1), add("a"),
                               layer(T::kGlobalAvgPool), fc("f", 0)});
  CHECK(e.find("layer 3 (\"add3\", add)") != std::string::npos);
  CHECK(e.find("16x4x4") != std::string::npos);
  CHECK(e.find("8x8x8") != std::string::npos);
  CHECK(e.find("shortcut = \"projection\"") != std::string::npos);
  // A window larger than its input.
  e = graph_error(1, 4, 4,
                  {pool(T::kMaxPool, 2, 2, 0), pool(T::kMaxPool, 2, 2, 0),
                   pool(T::kMaxPool, 2, 2, 0), fc("f", 0)});
  CHECK(e.find("layer 3 (\"maxpool3\", maxpool)") != std::string::npos);
  CHECK(e.find("1x1x1") != std::string::npos);
  // A conv after an fc.
  e = graph_error(1, 4, 4, {fc("f1", 8), conv("c", 4, 3, 1, 1), fc("f2", 0)});
  CHECK(e.find("layer 2 (\"c\", conv)") != std::string::npos);
  CHECK(e.find("image input") != std::string::npos);
  // An add naming a layer that does not exist, or a later one.
  e = graph_error(1, 4, 4, {conv("block1", 1, 3, 1, 1), add("blok1"), fc("f", 0)});
  CHECK(e.find("did you mean \"block1\"") != std::string::npos);
  e = graph_error(1, 4, 4, {add("c"), conv("c", 1, 3, 1, 1), fc("f", 0)});
  CHECK(e.find("names a later layer") != std::string::npos);
  // The output count must be the class count.
  e = graph_error(1, 4, 4, {fc("f", 7)});
  CHECK(e.find("7 outputs per example, but the data has 10 classes") != std::string::npos);
  // Repeated names.
  e = graph_error(1, 4, 4, {fc("f", 8), fc("f", 0)});
  CHECK(e.find("already used by layer 1") != std::string::npos);
  // A projection with a stride that cannot map the shapes.
  nn::LayerDesc proj = add("a", nn::Shortcut::kProjection);
  e = graph_error(1, 9, 9, {conv("a", 2, 3, 1, 1), conv("b", 2, 3, 1, 0), proj, fc("f", 0)});
  CHECK(e.find("no stride of a 1x1 projection") != std::string::npos);
  CHECK(graph_error(1, 4, 4, {layer(T::kFlatten), fc("f", 0)}).empty());
  CHECK(nn::layer_type_from_name("maxpool") == LayerType::kMaxPool);
  CHECK(!nn::layer_type_from_name("maxpol"));
  // A flatten read only by an fc is dropped (the fc reads NCHW order).
  const nn::Graph g = graph_of(2, 3, 3, {layer(T::kFlatten), fc("f", 0)}, 10);
  CHECK(g.nodes.size() == 1);
  CHECK(g.nodes[0].in == std::vector<std::int64_t>{2, 3, 3});
}

TEST_CASE("batch norm: predict uses the statistics of the parameters it was given", "[nn]") {
  // bn first: its input is the images, so the population statistics are
  // the images' per-channel mean and (biased) variance.
  using T = LayerType;
  nn::LayerDesc bn = layer(T::kBatchNorm);
  bn.eps = 1e-3;
  nn::cpu::CpuNetwork net(graph_of(3, 4, 5, {bn, layer(T::kFlatten)}), 8, 1);
  CHECK(net.has_batch_norm());
  const nn::ParamLayout& layout = net.layout();
  REQUIRE(layout.count == 6);
  const std::vector<float> params = {1.5f, -0.5f, 2.0f, 0.25f, 0.0f, -1.0f};  // gamma, beta
  const int batch = 4, batches = 3, per = 3 * 4 * 5;
  std::vector<float> x = normal_floats(static_cast<std::size_t>(batch * batches * per), 5, 2.0f);
  for (std::size_t i = 0; i < x.size(); ++i)
    x[i] += static_cast<float>((i / 20) % 3);  // per-channel offsets
  std::vector<float> logits(static_cast<std::size_t>(batch * per));
  CHECK_THROWS_AS(net.predict(params.data(), x.data(), batch, logits.data()),
                  syncopt::InternalError);
  net.set_batch_norm_statistics(params.data(), x.data(), batch, batches);
  std::vector<double> mean(3, 0.0), sq(3, 0.0);
  const double n = batch * batches * 20.0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t c = (i / 20) % 3;
    mean[c] += x[i] / n;
    sq[c] += static_cast<double>(x[i]) * x[i] / n;
  }
  net.predict(params.data(), x.data() + per, batch, logits.data());  // any examples
  for (int e = 0; e < batch; ++e) {
    for (int i = 0; i < per; ++i) {
      const std::size_t c = static_cast<std::size_t>(i / 20);
      const double var = sq[c] - mean[c] * mean[c];
      const double want = params[c] * (x[static_cast<std::size_t>(per + e * per + i)] - mean[c]) /
                              std::sqrt(var + 1e-3) +
                          params[3 + c];
      CHECK(logits[static_cast<std::size_t>(e * per + i)] == Approx(want).margin(2e-5));
    }
  }
}

TEST_CASE("dropout drops by logical position, whatever layout oneDNN keeps the tensor in", "[nn]") {
  // conv a (3x3, 3 -> 16 channels: oneDNN keeps its output blocked, e.g.
  // nChw16c on AVX-512, nChw8c on AVX2) -> conv c (1x1, 16 -> 16) ->
  // dropout (on c's blocked output) -> flatten (the logits, plain). With a's
  // centre tap the identity on the 3 image channels and c the identity,
  // dL/dimages = mask * scale * dL/dlogits on those channels, whose zeros are
  // exactly the dropped elements: they must be those of nn::dropout::keep
  // over the NCHW position (the CUDA backend's masks), not over oneDNN's
  // addresses.
  using T = LayerType;
  nn::LayerDesc d = layer(T::kDropout);
  d.rate = 0.4;
  const int batch = 3, c = 16, h = 8, w = 8;
  const nn::Graph g =
      graph_of(3, h, w, {conv("a", c, 3, 1, 1), conv("c", c, 1, 1, 0), d, layer(T::kFlatten)});
  REQUIRE(g.nodes.size() == 4);
  REQUIRE(g.nodes[2].type == T::kDropout);
  nn::cpu::CpuNetwork net(g, batch, 1);
  const std::uint64_t key = 1234567;
  net.set_dropout_key(key);
  const nn::ParamLayout& layout = net.layout();
  std::vector<float> params(layout.count, 0.0f);
  for (int i = 0; i < 3; ++i) {  // a.w [16, 3, 3, 3]: centre tap, o == i
    params[layout.find("a.w").offset + static_cast<std::size_t>(((i * 3 + i) * 3 + 1) * 3 + 1)] =
        1.0f;
  }
  for (int o = 0; o < c; ++o) {  // c.w [16, 16, 1, 1]
    params[layout.find("c.w").offset + static_cast<std::size_t>(o * c + o)] = 1.0f;
  }
  const std::size_t n_in = static_cast<std::size_t>(batch) * 3 * h * w;
  const std::vector<float> x = distinct_floats(n_in, 3);
  const auto y = labels_for(batch, c * h * w, 4);
  std::vector<float> grad(params.size()), dx(n_in);
  net.train_step_with_input_grad(params.data(), x.data(), y.data(), batch, grad.data(), dx.data());
  const std::uint64_t node_key = nn::dropout::node_key(key, 2);
  const std::uint64_t threshold = nn::dropout::threshold(0.4);
  std::size_t dropped = 0, mismatched = 0;
  for (int e = 0; e < batch; ++e) {
    for (int ch = 0; ch < 3; ++ch) {
      for (int p = 0; p < h * w; ++p) {
        const auto logical = static_cast<std::uint64_t>((e * c + ch) * h * w + p);
        const bool keep = nn::dropout::keep(node_key, logical, threshold);
        dropped += keep ? 0 : 1;
        const float g_in = dx[static_cast<std::size_t>((e * 3 + ch) * h * w + p)];
        mismatched += (g_in != 0.0f) == keep ? 0 : 1;
      }
    }
  }
  CHECK(mismatched == 0);
  const std::size_t seen = n_in;
  CHECK(dropped > seen / 4);  // about 40 %: the mask is not trivial
  CHECK(dropped < seen / 2 + seen / 10);
}

TEST_CASE("predict agrees with train_step -- small batches -- determinism", "[nn]") {
  const nn::ModelSpec spec = model("cnn", true);
  const nn::ParamLayout layout = nn::param_layout(spec);
  std::vector<float> params(layout.count);
  nn::init_params(spec, layout, params.data(), 5);
  auto backend = nn::make_cpu_backend(1);
  CHECK(backend->name() == "cpu");
  const int max_batch = 8;
  auto net = backend->make_network(spec, max_batch);
  CHECK(net->max_batch() == max_batch);
  const std::vector<float> x = normal_floats(max_batch * 784, 6);
  const auto y = labels_for(max_batch, 10, 7);
  std::vector<float> grad1(layout.count), grad2(layout.count);
  const float loss1 = net->train_step(params.data(), x.data(), y.data(), max_batch, grad1.data());
  const double loss_pred = loss_of(*net, params, x, y, max_batch, 10);
  CHECK(loss1 == Approx(loss_pred).epsilon(1e-6));

  // Determinism at 1 thread: bitwise equal, also after other batch sizes ran.
  std::vector<float> logits_small(3 * 10), logits_full(max_batch * 10);
  net->predict(params.data(), x.data(), 3, logits_small.data());
  const float loss2 = net->train_step(params.data(), x.data(), y.data(), max_batch, grad2.data());
  CHECK(loss1 == loss2);
  CHECK(grad1 == grad2);

  // A smaller batch gives the same logits as the first rows of a full one.
  net->predict(params.data(), x.data(), max_batch, logits_full.data());
  for (int i = 0; i < 30; ++i) CHECK(logits_small[i] == Approx(logits_full[i]).margin(1e-5));
  // And a smaller training batch works and matches its own predict.
  const float loss_small = net->train_step(params.data(), x.data(), y.data(), 3, grad2.data());
  CHECK(loss_small == Approx(loss_of(*net, params, x, y, 3, 10)).epsilon(1e-6));

  CHECK_THROWS_AS(net->train_step(params.data(), x.data(), y.data(), max_batch + 1, grad2.data()),
                  syncopt::InternalError);
  CHECK_THROWS_AS(net->predict(params.data(), x.data(), 0, logits_full.data()),
                  syncopt::InternalError);
  std::vector<std::int32_t> bad = y;
  bad[2] = 10;
  CHECK_THROWS_AS(net->train_step(params.data(), x.data(), bad.data(), max_batch, grad2.data()),
                  syncopt::DataError);
}

TEST_CASE("a few SGD steps on a fixed batch reduce the loss", "[nn]") {
  for (const std::string name : {"cnn", "mlp", "logreg"}) {
    const nn::ModelSpec spec = model(name, true);
    const nn::ParamLayout layout = nn::param_layout(spec);
    std::vector<float> params(layout.count), grad(layout.count);
    nn::init_params(spec, layout, params.data(), 9);
    auto net = nn::make_cpu_backend(1)->make_network(spec, 16);
    const std::vector<float> x = normal_floats(16 * 784, 10);
    const auto y = labels_for(16, 10, 11);
    const float first = net->train_step(params.data(), x.data(), y.data(), 16, grad.data());
    float last = first;
    std::vector<float> mom(params.size(), 0.0f);  // heavy-ball momentum 0.9
    for (int step = 0; step < 30; ++step) {
      for (std::size_t i = 0; i < params.size(); ++i) {
        mom[i] = 0.9f * mom[i] + grad[i];
        params[i] -= 0.05f * mom[i];
      }
      last = net->train_step(params.data(), x.data(), y.data(), 16, grad.data());
    }
    INFO(name << ": loss " << first << " -> " << last);
    CHECK(std::isfinite(last));
    CHECK(last < 0.5f * first);
  }
}

TEST_CASE("make_compute: cpu, cuda without CUDA", "[nn]") {
  CHECK(nn::make_cpu_backend(1)->name() == "cpu");
  syncopt::config::ComputeConfig cc;
  CHECK(app::make_compute(cc).make_backend(0)->name() == "cpu");
  cc.precision = nn::Precision::kBf16;
  if (nn::cpu_runs_bf16()) {
    CHECK(app::make_compute(cc).make_backend(0)->name() == "cpu");
  } else {  // an AVX2-only CPU: refused, saying why and what to use instead
    CHECK_THROWS_WITH(app::make_compute(cc).make_backend(0),
                      Catch::Contains("needs a CPU with AVX-512") &&
                          Catch::Contains("compute.precision = \"fp32\""));
  }
  cc.precision = nn::Precision::kFp32;
  if (!app::built_with_cuda()) {
    try {
      syncopt::config::ComputeConfig gpu;
      gpu.backend = syncopt::config::Backend::kCuda;
      app::make_compute(gpu);
      FAIL("cuda backend in a build without CUDA");
    } catch (const syncopt::ConfigError& e) {
      CHECK(std::string(e.what()).find("-DSYNCOPT_WITH_CUDA=ON") != std::string::npos);
    }
  }
  cc.threads = -1;
  CHECK_THROWS_AS(app::make_compute(cc), syncopt::ConfigError);
  CHECK_THROWS_AS(nn::make_cpu_backend(-1), syncopt::ConfigError);
  CHECK_THROWS_AS(nn::make_cpu_backend(1)->make_network(model("cnn", true), 0),
                  syncopt::ConfigError);
}
