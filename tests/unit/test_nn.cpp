// Tests of lib/nn: parameter layout and init, every layer's backward against
// central finite differences (layer by layer through CpuNetwork on one-layer
// nets, the hand-written ops in double precision, and the whole models),
// predict/train_step consistency, determinism and an SGD sanity run.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "nn/backend.hpp"
#include "nn/cpu_network.hpp"
#include "nn/ops.hpp"
#include "platform.hpp"

namespace nn = syncopt::nn;
namespace app = syncopt::app;
using nn::LayerKind;
using nn::LayerSpec;
using nn::NetSpec;

namespace {

std::vector<float> normal_floats(std::size_t n, std::uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

// Distinct values in [-1, 1], shuffled, spaced min(0.02, 2/n) apart (and never
// 0), so that on small inputs a finite-difference step of 1e-3 never changes
// a max-pool argmax or a ReLU sign.
std::vector<float> distinct_floats(std::size_t n, std::uint64_t seed) {
  std::vector<float> v(n);
  const double step = std::min(0.02, 2.0 / static_cast<double>(n));
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

// Loss in double from the float network's logits.
double loss_of(nn::Network& net, const std::vector<float>& params, const std::vector<float>& x,
               const std::vector<std::int32_t>& y, int batch, std::int64_t classes) {
  std::vector<float> logits(static_cast<std::size_t>(batch * classes));
  net.predict(params.data(), x.data(), batch, logits.data());
  std::vector<double> z(logits.begin(), logits.end());
  return nn::ops::softmax_cross_entropy<double>(z.data(), y.data(), batch, classes, nullptr);
}

struct FdResult {
  int checked = 0, failed = 0;
  double worst = 0.0;  // worst |fd - g| / (atol + rtol |g|)
  std::string first_failure;
};

// Central differences on entries `idx` of `values` (params or input), the
// loss evaluated by `loss()`; compares with `grad`. An entry that fails with
// step eps is retried with eps/5 (absolute tolerance x5 for the larger
// rounding noise): in a whole network some ReLU / max-pool kink is always
// within reach of some step, and a kink crossed at eps is rarely crossed at
// eps/5, whereas a wrong gradient fails at both.
template <class LossFn>
FdResult check_entries(std::vector<float>& values, const std::vector<float>& grad,
                       const std::vector<std::size_t>& idx, float eps, double atol, double rtol,
                       LossFn&& loss, const std::string& what) {
  FdResult r;
  for (std::size_t i : idx) {
    const double g = grad[i];
    double best = 1e300, best_fd = 0.0;
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
      }
      if (best <= 1.0) break;
    }
    r.worst = std::max(r.worst, best);
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
  int random = 6, top = 4;
};

// Gradient check of a layer list on a small batch: every parameter view and
// (optionally) the input.
// Parameters: N(0, 0.5^2) for the one-layer nets, or (when `model` is given)
// init_params of that model; then g = ||v|| * (0.7 + 0.1 (o mod 6)) and, for models,
// small random biases, so that no gradient is trivially 0 or 1.
void check_net(const NetSpec& spec, int batch, std::uint64_t seed, const NetCheck& opt = {},
               const nn::ModelSpec* model = nullptr) {
  nn::cpu::CpuNetwork net(spec, batch, 1);
  const nn::ParamLayout& layout = net.layout();
  const std::int64_t classes = nn::output_count(spec);
  std::vector<float> params = normal_floats(layout.count, seed, 0.5f);
  if (model != nullptr) {
    nn::init_params(*model, layout, params.data(), seed);
    const std::vector<float> noise = normal_floats(layout.count, seed + 3, 0.1f);
    for (const nn::ParamView& v : layout.views) {
      if (v.name.substr(v.name.size() - 2) == ".b") {
        for (std::size_t i = 0; i < v.count; ++i) params[v.offset + i] = noise[v.offset + i];
      }
    }
  }
  for (const nn::ParamView& v : layout.views) {  // g = ||v|| like init_params
    if (v.name.size() > 2 && v.name.substr(v.name.size() - 2) == ".g") {
      const nn::ParamView& dir = layout.find(v.name.substr(0, v.name.size() - 2) + ".v");
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
  }
  const std::size_t in_count =
      static_cast<std::size_t>(batch) * spec.channels * spec.height * spec.width;
  std::vector<float> x = distinct_floats(in_count, seed + 1);
  const auto y = labels_for(batch, classes, seed + 2);
  std::vector<float> grad(layout.count), dx(in_count);
  if (opt.input_grad) {
    net.train_step_with_input_grad(params.data(), x.data(), y.data(), batch, grad.data(),
                                   dx.data());
  } else {
    net.train_step(params.data(), x.data(), y.data(), batch, grad.data());
  }
  auto loss = [&] { return loss_of(net, params, x, y, batch, classes); };
  for (const nn::ParamView& v : layout.views) {
    const auto idx = pick(v.offset, v.count, grad, opt.random, opt.top, seed + v.offset);
    const FdResult r = check_entries(params, grad, idx, opt.eps, opt.atol, opt.rtol, loss, v.name);
    INFO(v.name << ": worst error/tolerance " << r.worst << "; " << r.first_failure);
    if (std::getenv("SYNCOPT_NN_VERBOSE")) WARN(v.name << " worst " << r.worst);
    CHECK(r.failed == 0);
  }
  if (opt.input_grad) {
    const auto idx = pick(0, in_count, dx, opt.random, opt.top, seed + 7);
    const FdResult r = check_entries(x, dx, idx, opt.eps, opt.atol, opt.rtol, loss, "input");
    INFO("input: worst error/tolerance " << r.worst << "; " << r.first_failure);
    if (std::getenv("SYNCOPT_NN_VERBOSE")) WARN("input worst " << r.worst);
    CHECK(r.failed == 0);
  }
}

NetSpec one_layer(int c, int h, int w, bool weight_norm, LayerSpec layer) {
  NetSpec s;
  s.channels = c;
  s.height = h;
  s.width = w;
  s.weight_norm = weight_norm;
  s.layers = {std::move(layer)};
  return s;
}

nn::ModelSpec model(const std::string& name, bool wn) {
  nn::ModelSpec s;
  s.name = name;
  s.weight_norm = wn;
  return s;
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
  CHECK_THROWS_AS(nn::param_layout(model("resnet", true)), syncopt::ConfigError);

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
  SECTION("conv3x3 with weight norm and fused relu") {
    check_net(one_layer(2, 5, 5, true, {LayerKind::kConv3x3, "conv1", 3, true}), 2, 11);
  }
  SECTION("conv3x3 without weight norm, no relu, 8-channel blocked input") {
    check_net(one_layer(8, 4, 4, false, {LayerKind::kConv3x3, "conv1", 8, false}), 2, 12);
  }
  SECTION("conv3x3 weight norm, 1 channel (the first cnn layer)") {
    check_net(one_layer(1, 6, 6, true, {LayerKind::kConv3x3, "conv1", 4, false}), 2, 13);
  }
  SECTION("max-pool 2x2") {
    check_net(one_layer(3, 4, 6, true, {LayerKind::kMaxPool2x2, "", 0, false}), 2, 14);
  }
  SECTION("relu") { check_net(one_layer(2, 3, 3, true, {LayerKind::kRelu, "", 0, false}), 2, 15); }
  SECTION("fc with weight norm and fused relu") {
    check_net(one_layer(3, 2, 2, true, {LayerKind::kFc, "fc1", 5, true}), 3, 16);
  }
  SECTION("fc without weight norm") {
    check_net(one_layer(1, 1, 7, false, {LayerKind::kFc, "fc1", 4, false}), 3, 17);
  }
  SECTION("conv - relu - pool - conv - pool - fc chain on blocked layouts") {
    NetSpec s;
    s.channels = 3;
    s.height = s.width = 8;
    s.layers = {{LayerKind::kConv3x3, "conv1", 8, true},   {LayerKind::kMaxPool2x2, "", 0, false},
                {LayerKind::kConv3x3, "conv2", 16, false}, {LayerKind::kRelu, "", 0, false},
                {LayerKind::kMaxPool2x2, "", 0, false},    {LayerKind::kFc, "fc1", 5, false}};
    check_net(s, 2, 18);
  }
}

TEST_CASE("whole models: gradient vs finite differences", "[nn]") {
  NetCheck opt;
  opt.input_grad = false;
  for (const auto& [name, wn] :
       {std::pair{"cnn", true}, std::pair{"cnn", false}, std::pair{"mlp", true},
        std::pair{"mlp", false}, std::pair{"logreg", true}}) {
    DYNAMIC_SECTION(name << (wn ? " with" : " without") << " weight norm") {
      const nn::ModelSpec spec = model(name, wn);
      check_net(nn::net_spec(spec), 3, 21, opt, &spec);
    }
  }
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

TEST_CASE("make_compute: cpu, cuda without CUDA, unknown", "[nn]") {
  CHECK(nn::make_cpu_backend(1)->name() == "cpu");
  CHECK(app::make_compute("cpu", 1).make_backend(0)->name() == "cpu");
  if (!app::built_with_cuda()) {
    try {
      app::make_compute("cuda", 1);
      FAIL("cuda backend in a build without CUDA");
    } catch (const syncopt::ConfigError& e) {
      CHECK(std::string(e.what()).find("-DSYNCOPT_WITH_CUDA=ON") != std::string::npos);
    }
  }
  CHECK_THROWS_AS(app::make_compute("tpu", 1), syncopt::ConfigError);
  CHECK_THROWS_AS(app::make_compute("cpu", -1), syncopt::ConfigError);
  CHECK_THROWS_AS(nn::make_cpu_backend(-1), syncopt::ConfigError);
  CHECK_THROWS_AS(nn::make_cpu_backend(1)->make_network(model("cnn", true), 0),
                  syncopt::ConfigError);
}
