// The device replica (CudaReplica) against the host replica, its oracle:
// - on one CUDA network with deterministic algorithms the two see the same
//   gradients, and the optimiser / EMA kernels compute optim/'s formulas in
//   its order without FMA contraction, so θ, θ̄ and the optimiser state must
//   be identical (tolerance 0), for SGD and RMSProp, with and without EMA
//   and weight decay, through a host (MPI-like) reducer too;
// - against the host replica on the CPU backend (another network: cuDNN and
//   oneDNN sum in other orders) θ stays within 1e-3 of its largest value
//   over 10 steps;
// - checkpoints move between the two (same State, field for field);
// - a non-finite gradient is seen, after compute_gradient and after a
//   reduction that makes it non-finite, without a host wait of its own: a
//   local step waits on the host once, a step through a host reducer three
//   times (loss, download, upload);
// - two 200-step runs with deterministic algorithms end bit-identical.
// main.cpp: SKIP (77) without a GPU.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "nn/backend.hpp"
#include "optim/optimizer.hpp"
#include "replica/replica.hpp"
#include "syncopt_cuda/api.hpp"
#include "syncopt_cuda/sync.hpp"

namespace nn = syncopt::nn;
namespace cu = syncopt::cuda;
namespace replica = syncopt::replica;

namespace {

struct Batch {
  std::vector<float> images;
  std::vector<std::int32_t> labels;
};

// A fixed sequence of batches (the same for every replica): synthetic
// images whose class is written into them, so the loss can fall.
std::vector<Batch> batches(int count, int batch, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> noise(0.0f, 0.3f);
  std::vector<Batch> out(static_cast<std::size_t>(count));
  for (Batch& b : out) {
    b.images.resize(std::size_t{28 * 28} * batch);
    b.labels.resize(static_cast<std::size_t>(batch));
    for (int r = 0; r < batch; ++r) {
      const auto label = static_cast<std::int32_t>(rng() % 10);
      b.labels[static_cast<std::size_t>(r)] = label;
      for (int p = 0; p < 28 * 28; ++p) {
        const bool on = (p / 28) / 3 == label;  // a band of rows per class
        b.images[static_cast<std::size_t>(r) * 784 + p] = (on ? 1.0f : 0.0f) + noise(rng);
      }
    }
  }
  return out;
}

// As if averaging with a peer whose gradient is zero: proves the gradient
// went out to the host, through the reducer, and back.
class HalvingReducer final : public syncopt::comm::Reducer {
 public:
  std::string name() const override { return "halving"; }
  void mean(float* buf, std::size_t count) override {
    for (std::size_t i = 0; i < count; ++i) buf[i] *= 0.5f;
  }
  // The peer computed nothing: the sum is ours (its examples count too).
  void sum(float* buf, std::size_t count) override { (void)buf, (void)count; }
};

// Puts a NaN into the mean, as a peer with a diverged gradient would.
class PoisonReducer final : public syncopt::comm::Reducer {
 public:
  std::string name() const override { return "poison"; }
  void mean(float* buf, std::size_t count) override {
    if (count > 0) buf[count / 3] = std::numeric_limits<float>::quiet_NaN();
  }
  void sum(float* buf, std::size_t count) override { mean(buf, count); }
};

std::vector<float> theta_of(const replica::Replica& r) {
  std::vector<float> v(r.count());
  r.copy_theta(v.data());
  return v;
}
std::vector<float> ema_of(const replica::Replica& r) {
  std::vector<float> v(r.count());
  r.copy_ema(v.data());
  return v;
}

double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return scale > 0.0 ? diff / scale : diff;
}

std::unique_ptr<nn::Backend> deterministic_gpu() {
  cu::CudaOptions opt;
  opt.deterministic = true;
  return cu::make_cuda_backend(1, cu::pick_device(0), opt);
}

struct OptCase {
  const char* label;
  const char* name;
  double ema;
  double weight_decay;
  bool reduce;
};

}  // namespace

TEST_CASE("cuda replica: equals the host replica on the same network, bit for bit",
          "[cuda][replica]") {
  nn::ModelSpec spec;  // the reference CNN
  const nn::ParamLayout layout = nn::param_layout(spec);
  std::vector<float> init(layout.count);
  nn::init_params(spec, layout, init.data(), 11);
  const int batch = 32, steps = 12;
  const auto data = batches(steps, batch, 12);
  auto gpu = deterministic_gpu();
  auto net = gpu->make_network(spec, batch);
  for (const OptCase oc : {OptCase{"sgd", "sgd", 0.0, 0.0, false},
                           OptCase{"sgd + ema + wd + reducer", "sgd", 0.99, 1e-4, true},
                           OptCase{"rmsprop", "rmsprop", 0.0, 0.0, false},
                           OptCase{"rmsprop + ema + wd", "rmsprop", 0.9999, 1e-4, false}}) {
    DYNAMIC_SECTION(oc.label) {
      replica::ReplicaOptions ro;
      ro.optim.name = *syncopt::config::enum_from_name<syncopt::config::OptimizerName>(oc.name);
      ro.optim.weight_decay = oc.weight_decay;
      ro.ema_decay = oc.ema;
      auto host = replica::make_host_replica(*net, init.data(), layout.count, ro);
      auto dev = cu::make_cuda_replica(*net, init.data(), layout.count, ro);
      HalvingReducer halve;
      for (int k = 0; k < steps; ++k) {
        const Batch& b = data[static_cast<std::size_t>(k)];
        const float lh = host->compute_gradient(b.images.data(), b.labels.data(), batch);
        const float ld = dev->compute_gradient(b.images.data(), b.labels.data(), batch);
        CHECK(lh == ld);
        if (oc.reduce) {
          host->reduce_gradient(halve);
          dev->reduce_gradient(halve);
        }
        CHECK(host->gradient_finite());
        CHECK(dev->gradient_finite());
        const float lr = oc.name == std::string("sgd") ? 0.05f : 0.001f;
        host->apply(lr);
        dev->apply(lr);
      }
      CHECK(theta_of(*dev) == theta_of(*host));
      CHECK(ema_of(*dev) == ema_of(*host));
      CHECK(dev->state() == host->state());  // format and values
    }
  }
}

TEST_CASE("cuda replica: follows the host replica on the CPU backend", "[cuda][replica]") {
  nn::ModelSpec spec;
  const nn::ParamLayout layout = nn::param_layout(spec);
  std::vector<float> init(layout.count);
  nn::init_params(spec, layout, init.data(), 21);
  const int batch = 64, steps = 10;
  const auto data = batches(steps, batch, 22);
  auto cpu = nn::make_cpu_backend(0);
  auto gpu = cu::make_cuda_backend(1, cu::pick_device(0));
  auto net_cpu = cpu->make_network(spec, batch);
  auto net_gpu = gpu->make_network(spec, batch);
  for (const char* name : {"sgd", "rmsprop"}) {
    DYNAMIC_SECTION(name) {
      replica::ReplicaOptions ro;
      ro.optim.name = *syncopt::config::enum_from_name<syncopt::config::OptimizerName>(name);
      ro.ema_decay = 0.99;
      auto host = replica::make_host_replica(*net_cpu, init.data(), layout.count, ro);
      auto dev = cu::make_cuda_replica(*net_gpu, init.data(), layout.count, ro);
      std::vector<float> loss_h, loss_d;
      for (int k = 0; k < steps; ++k) {
        const Batch& b = data[static_cast<std::size_t>(k)];
        loss_h.push_back(host->compute_gradient(b.images.data(), b.labels.data(), batch));
        loss_d.push_back(dev->compute_gradient(b.images.data(), b.labels.data(), batch));
        const float lr = name == std::string("sgd") ? 0.05f : 0.001f;
        host->apply(lr);
        dev->apply(lr);
      }
      // Tolerance: 1e-3 of the largest |θ| after 10 steps; each step's
      // loss within 1e-3 relative.
      for (int k = 0; k < steps; ++k) {
        CHECK(std::fabs(loss_d[k] - loss_h[k]) <= 1e-3f * std::max(1.0f, loss_h[k]));
      }
      CHECK(rel_err(theta_of(*dev), theta_of(*host)) < 1e-3);
      CHECK(rel_err(ema_of(*dev), ema_of(*host)) < 1e-3);
      CHECK(loss_d.back() < loss_d.front());  // it learns
    }
  }
}

TEST_CASE("cuda replica: checkpoints move between host and device replicas",
          "[cuda][replica][checkpoint]") {
  nn::ModelSpec spec;
  spec.model = syncopt::nn::Builtin::kMlp;
  const nn::ParamLayout layout = nn::param_layout(spec);
  std::vector<float> init(layout.count);
  nn::init_params(spec, layout, init.data(), 31);
  const int batch = 16;
  const auto data = batches(10, batch, 32);
  auto gpu = deterministic_gpu();
  auto net = gpu->make_network(spec, batch);
  replica::ReplicaOptions ro;
  ro.optim.name = syncopt::config::OptimizerName::kRmsprop;
  ro.ema_decay = 0.999;
  auto step = [&](replica::Replica& r, int k) {
    const Batch& b = data[static_cast<std::size_t>(k)];
    r.compute_gradient(b.images.data(), b.labels.data(), batch);
    r.apply(0.001f);
  };
  auto host = replica::make_host_replica(*net, init.data(), layout.count, ro);
  for (int k = 0; k < 5; ++k) step(*host, k);
  // Host state -> a fresh device replica; both go on, and stay equal.
  auto dev = cu::make_cuda_replica(*net, init.data(), layout.count, ro);
  dev->restore(host->state());
  CHECK(dev->state() == host->state());
  for (int k = 5; k < 10; ++k) {
    step(*host, k);
    step(*dev, k);
  }
  CHECK(theta_of(*dev) == theta_of(*host));
  // Device state -> a fresh host replica.
  auto host2 = replica::make_host_replica(*net, init.data(), layout.count, ro);
  host2->restore(dev->state());
  CHECK(host2->state() == dev->state());
  // A state of other settings is refused, and leaves the replica as it was.
  replica::ReplicaOptions other = ro;
  other.optim.name = syncopt::config::OptimizerName::kSgd;
  auto sgd = cu::make_cuda_replica(*net, init.data(), layout.count, other);
  const auto before = sgd->state();
  CHECK_THROWS_AS(sgd->restore(dev->state()), syncopt::ConfigError);
  CHECK(sgd->state() == before);
}

TEST_CASE("cuda replica: a non-finite gradient is seen", "[cuda][replica]") {
  nn::ModelSpec spec;
  spec.model = syncopt::nn::Builtin::kMlp;
  const nn::ParamLayout layout = nn::param_layout(spec);
  std::vector<float> init(layout.count);
  nn::init_params(spec, layout, init.data(), 41);
  const auto data = batches(1, 8, 42);
  auto gpu = cu::make_cuda_backend(1, cu::pick_device(0));
  auto net = gpu->make_network(spec, 8);
  auto dev = cu::make_cuda_replica(*net, init.data(), layout.count, {});
  dev->compute_gradient(data[0].images.data(), data[0].labels.data(), 8);
  CHECK(dev->gradient_finite());
  std::vector<float> bad = init;
  bad[layout.count / 2] = std::numeric_limits<float>::quiet_NaN();
  auto dev2 = cu::make_cuda_replica(*net, bad.data(), layout.count, {});
  dev2->compute_gradient(data[0].images.data(), data[0].labels.data(), 8);
  CHECK_FALSE(dev2->gradient_finite());
  // Finite after the backward pass, not after the reduction: the flag is
  // the reduced gradient's, not a stale one.
  dev->compute_gradient(data[0].images.data(), data[0].labels.data(), 8);
  REQUIRE(dev->gradient_finite());
  PoisonReducer poison;
  dev->reduce_gradient(poison);
  CHECK_FALSE(dev->gradient_finite());
  HalvingReducer halve;  // and a healthy reduction is finite again
  dev->compute_gradient(data[0].images.data(), data[0].labels.data(), 8);
  dev->reduce_gradient(halve);
  CHECK(dev->gradient_finite());
}

TEST_CASE("cuda replica: one host wait per local step, three through a host reducer",
          "[cuda][replica]") {
  // The loop of local mode: compute_gradient, gradient_finite, apply. The
  // finite check rides on the loss read-back and apply is not waited for,
  // so the host waits once per step; a host (MPI-like) reducer adds its
  // download and its upload, which carries the finite check.
  nn::ModelSpec spec;
  const nn::ParamLayout layout = nn::param_layout(spec);
  std::vector<float> init(layout.count);
  nn::init_params(spec, layout, init.data(), 61);
  const int batch = 32;
  const auto data = batches(4, batch, 62);
  auto gpu = cu::make_cuda_backend(1, cu::pick_device(0));
  auto net = gpu->make_network(spec, batch);
  replica::ReplicaOptions ro;
  ro.ema_decay = 0.999;
  auto dev = cu::make_cuda_replica(*net, init.data(), layout.count, ro);
  HalvingReducer halve;
  auto step = [&](int k, bool reduce) {
    const Batch& b = data[static_cast<std::size_t>(k)];
    const std::uint64_t waits = cu::host_wait_count();
    dev->compute_gradient(b.images.data(), b.labels.data(), batch);
    if (reduce) dev->reduce_gradient(halve);
    const bool finite = dev->gradient_finite();
    dev->apply(0.01f);
    CHECK(finite);
    return cu::host_wait_count() - waits;
  };
  step(0, false);  // the first step plans the batch (cuDNN's algorithm search)
  CHECK(step(1, false) == 1);
  CHECK(step(2, false) == 1);
  CHECK(step(3, true) == 3);
}

TEST_CASE("cuda replica: two 200-step runs with deterministic algorithms are identical",
          "[cuda][replica][repeat]") {
  // Everything made twice from scratch (backend, network, algorithm choice,
  // replica), as two processes would.
  nn::ModelSpec spec;
  const nn::ParamLayout layout = nn::param_layout(spec);
  std::vector<float> init(layout.count);
  nn::init_params(spec, layout, init.data(), 51);
  const int batch = 64, steps = 200;
  const auto data = batches(20, batch, 52);
  auto run = [&](std::vector<float>& losses) {
    auto gpu = deterministic_gpu();
    auto net = gpu->make_network(spec, batch);
    replica::ReplicaOptions ro;
    ro.ema_decay = 0.999;
    auto r = cu::make_cuda_replica(*net, init.data(), layout.count, ro);
    for (int k = 0; k < steps; ++k) {
      const Batch& b = data[static_cast<std::size_t>(k % 20)];
      losses.push_back(r->compute_gradient(b.images.data(), b.labels.data(), batch));
      r->apply(0.02f);
    }
    return std::make_pair(theta_of(*r), ema_of(*r));
  };
  std::vector<float> loss1, loss2;
  const auto [theta1, ema1] = run(loss1);
  const auto [theta2, ema2] = run(loss2);
  CHECK(loss1 == loss2);
  CHECK(theta1 == theta2);
  CHECK(ema1 == ema2);
  CHECK(loss1.back() < 0.5f * loss1.front());  // and it trained
}
