// The parameter state of whoever applies updates: θ, the optimiser's
// buffers and the EMA θ̄, updated together and checkpointed together (the
// params layout of checkpoint/parts.hpp). A parameter-server shard holds one
// for its slice; the host replica (local and allreduce) for the whole model.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "checkpoint/state.hpp"
#include "optim/optimizer.hpp"

namespace syncopt::optim {

class ParamState {
 public:
  // `init` [count] is θ at version 0; ema_decay 0 keeps no EMA (θ̄ is θ).
  ParamState(const OptimizerOptions& opt, double ema_decay, const float* init, std::size_t count);

  // θ <- optimiser(θ, grad, lr), then θ̄ folds θ in. grad [count].
  void apply(const float* grad, float lr);
  // apply() in pieces (the pipelined exchange): θ[offset, offset + count)
  // with grad [count] of that range, its EMA folded in; end_update() counts
  // the update once every range of it is applied. The same bits as apply().
  void apply_range(std::size_t offset, std::size_t count, const float* grad, float lr);
  void end_update();

  std::size_t count() const { return m_theta.size(); }
  const float* theta() const { return m_theta.data(); }
  const std::vector<float>& theta_vector() const { return m_theta; }
  bool has_ema() const { return m_use_ema; }
  // θ̄, or θ without an EMA.
  const float* average() const { return m_use_ema ? m_ema.data() : m_theta.data(); }

  // The params layout; restore() needs a state of the same count, optimiser
  // and EMA (else ConfigError naming the field and `what_differs`, e.g.
  // "model and cluster.ps"), and leaves this object as it was if it throws.
  checkpoint::State state() const;
  void restore(const checkpoint::State& s, const std::string& what_differs);

 private:
  std::vector<float> m_theta;
  Optimizer m_opt;
  bool m_use_ema;
  Ema m_ema;
};

}  // namespace syncopt::optim
