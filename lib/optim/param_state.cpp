// θ, optimiser and EMA together (see param_state.hpp).
#include "optim/param_state.hpp"

#include "checkpoint/parts.hpp"

namespace syncopt::optim {

ParamState::ParamState(const OptimizerOptions& opt, double ema_decay, const float* init,
                       std::size_t count)
    : m_theta(init, init + count),
      m_opt(opt, count),
      m_use_ema(ema_decay > 0.0),
      m_ema(ema_decay, init, m_use_ema ? count : 0) {}

void ParamState::apply(const float* grad, float lr) {
  m_opt.step(m_theta.data(), grad, lr);
  if (m_use_ema) m_ema.update(m_theta.data());
}

void ParamState::apply_range(std::size_t offset, std::size_t count, const float* grad, float lr) {
  m_opt.step_range(m_theta.data(), grad, lr, offset, count);
  if (m_use_ema) m_ema.update_range(m_theta.data(), offset, count);
}

void ParamState::end_update() {
  if (m_use_ema) m_ema.advance();
}

checkpoint::State ParamState::state() const {
  checkpoint::State s;
  checkpoint::put_params(
      s, m_theta, m_opt.state(),
      m_use_ema ? std::optional<checkpoint::State>(m_ema.state()) : std::nullopt);
  return s;
}

void ParamState::restore(const checkpoint::State& s, const std::string& what_differs) {
  auto p = checkpoint::get_params(s, m_theta.size(), m_use_ema, what_differs);
  // Checked on copies first, so that a refused state changes nothing.
  Optimizer opt = m_opt;
  opt.restore(p.optim);
  Ema ema = m_ema;
  if (m_use_ema) ema.restore(*p.ema);
  m_theta = std::move(p.theta);
  m_opt = std::move(opt);
  m_ema = std::move(ema);
}

}  // namespace syncopt::optim
