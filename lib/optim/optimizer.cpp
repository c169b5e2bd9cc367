// Optimiser update rules, learning-rate schedules and the EMA (see the header
// for the formulas).
#include "optim/optimizer.hpp"

#include <algorithm>
#include <cmath>

#include "common/error.hpp"

namespace syncopt::optim {

Optimizer::Optimizer(const OptimizerOptions& opt, std::size_t count)
    : m_opt(opt), m_count(count), m_mom(count, 0.0f) {
  if (opt.name == "rmsprop") {
    m_ms.assign(count, 1.0f);
  } else if (opt.name != "sgd") {
    throw ConfigError("optim.name = \"" + opt.name + "\": expected \"sgd\" or \"rmsprop\"");
  }
}

void Optimizer::step(float* params, const float* grad, float lr) {
  const float mu = static_cast<float>(m_opt.momentum);
  const float wd = static_cast<float>(m_opt.weight_decay);
  float* mom = m_mom.data();
  const std::size_t n = m_count;
  if (m_ms.empty()) {
    for (std::size_t i = 0; i < n; ++i) {
      const float g = grad[i] + wd * params[i];
      mom[i] = mu * mom[i] + g;
      params[i] -= lr * mom[i];
    }
    return;
  }
  const float d = static_cast<float>(m_opt.rms_decay);
  const float eps = static_cast<float>(m_opt.eps);
  float* ms = m_ms.data();
  for (std::size_t i = 0; i < n; ++i) {
    const float g = grad[i] + wd * params[i];
    ms[i] = d * ms[i] + (1.0f - d) * g * g;
    mom[i] = mu * mom[i] + lr * g / std::sqrt(ms[i] + eps);
    params[i] -= mom[i];
  }
}

double learning_rate(const ScheduleOptions& s, double epoch) {
  std::string shape = s.name;
  double warm = 1.0;
  if (shape.rfind("warmup_", 0) == 0) {
    shape = shape.substr(7);
    if (s.warmup_epochs > 0.0) warm = std::min(1.0, epoch / s.warmup_epochs);
  }
  double lr = s.base_lr;
  if (shape == "constant") {
  } else if (shape == "exponential") {
    lr *= std::pow(s.decay_rate, std::floor(epoch / s.decay_epochs));
  } else if (shape == "linear_anneal") {
    const double span = s.anneal_epochs > 0.0 ? s.anneal_epochs : s.total_epochs;
    lr *= std::clamp((s.total_epochs - epoch) / span, 0.0, 1.0);
  } else {
    throw ConfigError("optim.schedule = \"" + s.name + "\": unknown schedule");
  }
  return lr * warm * s.lr_multiplier;
}

Ema::Ema(double decay, const float* initial, std::size_t count)
    : m_decay(decay), m_avg(initial, initial + count) {}

void Ema::update(const float* params) {
  const double t = static_cast<double>(m_updates);
  const float a = static_cast<float>(std::min(m_decay, (1.0 + t) / (10.0 + t)));
  const float b = 1.0f - a;
  float* avg = m_avg.data();
  const std::size_t n = m_avg.size();
  for (std::size_t i = 0; i < n; ++i) avg[i] = a * avg[i] + b * params[i];
  ++m_updates;
}

OptimizerOptions optimizer_options(const config::OptimConfig& c) {
  OptimizerOptions o;
  o.name = c.name;
  o.momentum = c.momentum;
  o.rms_decay = c.rms_decay;
  o.eps = c.eps;
  o.weight_decay = c.weight_decay;
  return o;
}

ScheduleOptions schedule_options(const config::OptimConfig& c, double total_epochs,
                                 double lr_multiplier) {
  ScheduleOptions s;
  s.name = c.schedule;
  s.base_lr = c.lr;
  s.decay_rate = c.decay_rate;
  s.decay_epochs = c.decay_epochs;
  s.anneal_epochs = c.anneal_epochs;
  s.warmup_epochs = c.warmup_epochs;
  s.total_epochs = total_epochs;
  s.lr_multiplier = lr_multiplier;
  return s;
}

}  // namespace syncopt::optim
