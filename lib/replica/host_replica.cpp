// The host replica (see replica.hpp).
#include <cmath>
#include <vector>

#include "common/error.hpp"
#include "common/finite.hpp"
#include "replica/replica.hpp"

namespace syncopt::replica {

namespace {

class HostReplica final : public Replica {
 public:
  HostReplica(nn::Network& net, const float* init, std::size_t count, const ReplicaOptions& opt)
      : m_net(net),
        m_theta(init, init + count),
        m_grad(count),
        m_opt(opt.optim, count),
        m_use_ema(opt.ema_decay > 0.0),
        m_ema(opt.ema_decay, init, m_use_ema ? count : 0) {}

  std::size_t count() const override { return m_theta.size(); }

  float compute_gradient(const float* images, const std::int32_t* labels, int batch) override {
    return m_net.train_step(m_theta.data(), images, labels, batch, m_grad.data());
  }
  float compute_gradient_at(const float* theta, const float* images, const std::int32_t* labels,
                            int batch) override {
    return m_net.train_step(theta, images, labels, batch, m_grad.data());
  }
  void reduce_gradient(comm::Reducer& reducer) override {
    reducer.mean(m_grad.data(), m_grad.size());
  }
  bool gradient_finite() const override { return all_finite(m_grad.data(), m_grad.size()); }
  void apply(float lr) override {
    m_opt.step(m_theta.data(), m_grad.data(), lr);
    if (m_use_ema) m_ema.update(m_theta.data());
  }
  void copy_theta(float* out) const override { std::copy(m_theta.begin(), m_theta.end(), out); }
  void copy_ema(float* out) const override {
    if (!m_use_ema) return copy_theta(out);
    std::copy(m_ema.data(), m_ema.data() + m_ema.count(), out);
  }
  checkpoint::State state() const override {
    checkpoint::State s;
    s.put("theta", m_theta);
    s.put_child("optim", m_opt.state());
    if (m_use_ema) s.put_child("ema", m_ema.state());
    return s;
  }
  void restore(const checkpoint::State& s) override {
    const auto& theta = s.get<std::vector<float>>("theta");
    if (theta.size() != m_theta.size()) {
      throw DataError(s.field_error("theta", std::to_string(theta.size()) +
                                                 " parameters, this model has " +
                                                 std::to_string(m_theta.size())));
    }
    m_theta = theta;
    m_opt.restore(s.child("optim"));
    if (m_use_ema) m_ema.restore(s.child("ema"));
  }

 private:
  nn::Network& m_net;
  std::vector<float> m_theta, m_grad;
  optim::Optimizer m_opt;
  bool m_use_ema;
  optim::Ema m_ema;
};

}  // namespace

std::unique_ptr<Replica> make_host_replica(nn::Network& net, const float* init, std::size_t count,
                                           const ReplicaOptions& opt) {
  return std::make_unique<HostReplica>(net, init, count, opt);
}

}  // namespace syncopt::replica
