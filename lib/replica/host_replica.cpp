// The host replica (see replica.hpp).
#include <algorithm>
#include <cmath>
#include <vector>

#include "common/error.hpp"
#include "common/finite.hpp"
#include "optim/param_state.hpp"
#include "replica/replica.hpp"

namespace syncopt::replica {

namespace {

class HostReplica final : public Replica {
 public:
  HostReplica(nn::Network& net, const float* init, std::size_t count, const ReplicaOptions& opt)
      : m_net(net), m_params(opt.optim, opt.ema_decay, init, count), m_grad(count) {}

  std::size_t count() const override { return m_params.count(); }

  float compute_gradient(const float* images, const std::int32_t* labels, int batch) override {
    return m_net.train_step(m_params.theta(), images, labels, batch, m_grad.data());
  }
  float compute_gradient_at(const float* theta, const float* images, const std::int32_t* labels,
                            int batch) override {
    return m_net.train_step(theta, images, labels, batch, m_grad.data());
  }
  void reduce_gradient(comm::Reducer& reducer) override {
    reducer.mean(m_grad.data(), m_grad.size());
  }
  float accumulate_gradient(const float* images, const std::int32_t* labels, int batch,
                            bool first) override {
    const float loss = m_net.train_step(m_params.theta(), images, labels, batch, m_grad.data());
    m_sum.resize(m_grad.size() + 1);
    const auto w = static_cast<float>(batch);
    if (first) {
      for (std::size_t i = 0; i < m_grad.size(); ++i) m_sum[i] = w * m_grad[i];
    } else {
      for (std::size_t i = 0; i < m_grad.size(); ++i) m_sum[i] += w * m_grad[i];
    }
    return loss;
  }
  double reduce_gradient_sum(comm::Reducer& reducer, double examples) override {
    m_sum.resize(m_grad.size() + 1);
    m_sum.back() = static_cast<float>(examples);
    reducer.sum(m_sum.data(), m_sum.size());
    const double total = m_sum.back();
    const auto inv = static_cast<float>(1.0 / total);
    for (std::size_t i = 0; i < m_grad.size(); ++i) m_grad[i] = m_sum[i] * inv;
    return total;
  }
  bool gradient_finite() const override { return all_finite(m_grad.data(), m_grad.size()); }
  void apply(float lr) override { m_params.apply(m_grad.data(), lr); }
  void copy_theta(float* out) const override { std::copy_n(m_params.theta(), count(), out); }
  void copy_ema(float* out) const override { std::copy_n(m_params.average(), count(), out); }
  checkpoint::State state() const override { return m_params.state(); }
  void restore(const checkpoint::State& s) override { m_params.restore(s, "model"); }

 private:
  nn::Network& m_net;
  optim::ParamState m_params;
  std::vector<float> m_grad;
  std::vector<float> m_sum;  // micro-batches: the step's gradient sum, then its examples
};

}  // namespace

std::unique_ptr<Replica> make_host_replica(nn::Network& net, const float* init, std::size_t count,
                                           const ReplicaOptions& opt) {
  return std::make_unique<HostReplica>(net, init, count, opt);
}

}  // namespace syncopt::replica
