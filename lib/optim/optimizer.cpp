// Optimiser update rules, learning-rate schedules and the EMA (see the header
// for the formulas), and their checkpoint state.
#include "optim/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "common/error.hpp"

namespace syncopt::optim {

namespace {

using checkpoint::State;

std::string number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// A restore() whose checkpoint was saved with other settings: the config
// changed between the runs, which only the user can settle.
[[noreturn]] void throw_mismatch(const State& s, const std::string& field, const std::string& key,
                                 const std::string& saved, const std::string& now) {
  throw ConfigError(
      "cannot resume: " +
      s.field_error(field, "saved with " + key + " = " + saved + ", but it is " + now + " now") +
      "; resume with the settings the run started with, or start a fresh run "
      "(run.resume = false)");
}

void check_same(const State& s, const std::string& field, const std::string& key, double now) {
  const double saved = s.get<double>(field);
  if (saved != now) throw_mismatch(s, field, key, number(saved), number(now));
}

// A float buffer of exactly `count` values, else DataError naming it.
const std::vector<float>& buffer(const State& s, const std::string& field, std::size_t count) {
  const auto& v = s.get<std::vector<float>>(field);
  if (v.size() != count) {
    throw DataError(s.field_error(
        field, "holds " + std::to_string(v.size()) + " values, expected " + std::to_string(count)));
  }
  return v;
}

void check_count(const State& s, std::size_t count) {
  const std::uint64_t saved = s.get<std::uint64_t>("count");
  if (saved != count) {
    throw_mismatch(s, "count", "parameter count", std::to_string(saved),
                   std::to_string(count) + " (another model or shard layout)");
  }
}

bool has_warmup(config::Schedule s) {
  using S = config::Schedule;
  return s == S::kWarmupConstant || s == S::kWarmupExponential || s == S::kWarmupLinearAnneal;
}

}  // namespace

Optimizer::Optimizer(const OptimizerOptions& opt, std::size_t count)
    : m_opt(opt), m_count(count), m_mom(count, 0.0f) {
  switch (opt.name) {
    case config::OptimizerName::kRmsprop:
      m_ms.assign(count, 1.0f);
      break;
    case config::OptimizerName::kSgd:
      break;
  }
}

void Optimizer::step(float* params, const float* grad, float lr) {
  step_range(params, grad, lr, 0, m_count);
}

// Element-wise, so updating a slice in pieces gives the bits of one pass.
void Optimizer::step_range(float* params, const float* grad, float lr, std::size_t offset,
                           std::size_t count) {
  if (offset + count > m_count) {
    throw InternalError("Optimizer::step_range [" + std::to_string(offset) + ", " +
                        std::to_string(offset + count) + ") outside " + std::to_string(m_count));
  }
  const float mu = static_cast<float>(m_opt.momentum);
  const float wd = static_cast<float>(m_opt.weight_decay);
  float* mom = m_mom.data() + offset;
  params += offset;
  const std::size_t n = count;
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
  float* ms = m_ms.data() + offset;
  for (std::size_t i = 0; i < n; ++i) {
    const float g = grad[i] + wd * params[i];
    ms[i] = d * ms[i] + (1.0f - d) * g * g;
    mom[i] = mu * mom[i] + lr * g / std::sqrt(ms[i] + eps);
    params[i] -= mom[i];
  }
}

State Optimizer::state() const { return encode(m_opt, m_mom, m_ms.empty() ? nullptr : &m_ms); }

State Optimizer::encode(const OptimizerOptions& opt, const std::vector<float>& mom,
                        const std::vector<float>* ms) {
  State s;
  s.put("name", config::to_string(opt.name));
  s.put("momentum", opt.momentum);
  s.put("rms_decay", opt.rms_decay);
  s.put("eps", opt.eps);
  s.put("weight_decay", opt.weight_decay);
  s.put("count", std::uint64_t{mom.size()});
  s.put("mom", mom);
  if (ms != nullptr) s.put("ms", *ms);
  return s;
}

void Optimizer::restore(const State& s) {
  // Everything is checked before anything is assigned: a failed restore
  // leaves the optimiser as it was.
  const auto& name = s.get<std::string>("name");
  if (name != config::enum_name(m_opt.name)) {
    throw_mismatch(s, "name", "optim.name", name, config::to_string(m_opt.name));
  }
  check_same(s, "momentum", "optim.momentum", m_opt.momentum);
  check_same(s, "rms_decay", "optim.rms_decay", m_opt.rms_decay);
  check_same(s, "eps", "optim.eps", m_opt.eps);
  check_same(s, "weight_decay", "optim.weight_decay", m_opt.weight_decay);
  check_count(s, m_count);
  const auto& mom = buffer(s, "mom", m_count);
  const std::vector<float>* ms = m_ms.empty() ? nullptr : &buffer(s, "ms", m_count);
  m_mom = mom;
  if (ms) m_ms = *ms;
}

double learning_rate(const ScheduleOptions& s, double epoch) {
  // The operations and their order are those of the string-comparing
  // version this replaced, so every lr is bit-identical to it.
  using S = config::Schedule;
  double warm = 1.0;
  if (has_warmup(s.name) && s.warmup_epochs > 0.0) warm = std::min(1.0, epoch / s.warmup_epochs);
  double lr = s.base_lr;
  switch (s.name) {
    case S::kConstant:
    case S::kWarmupConstant:
      break;
    case S::kExponential:
    case S::kWarmupExponential:
      lr *= std::pow(s.decay_rate, std::floor(epoch / s.decay_epochs));
      lr = std::max(lr, s.final_lr);
      break;
    case S::kLinearAnneal:
    case S::kWarmupLinearAnneal: {
      // final_lr = 0 gives exactly lr * clamp(...), as before the key existed.
      const double span = s.anneal_epochs > 0.0 ? s.anneal_epochs : s.total_epochs;
      lr = s.final_lr + (lr - s.final_lr) * std::clamp((s.total_epochs - epoch) / span, 0.0, 1.0);
      break;
    }
  }
  return lr * warm;
}

Ema::Ema(double decay, const float* initial, std::size_t count)
    : m_decay(decay), m_avg(initial, initial + count) {}

void Ema::update(const float* params) {
  update_range(params, 0, m_avg.size());
  advance();
}

void Ema::update_range(const float* params, std::size_t offset, std::size_t count) {
  if (offset + count > m_avg.size()) {
    throw InternalError("Ema::update_range [" + std::to_string(offset) + ", " +
                        std::to_string(offset + count) + ") outside " +
                        std::to_string(m_avg.size()));
  }
  const double t = static_cast<double>(m_updates);
  const float a = static_cast<float>(std::min(m_decay, (1.0 + t) / (10.0 + t)));
  const float b = 1.0f - a;
  float* avg = m_avg.data() + offset;
  params += offset;
  for (std::size_t i = 0; i < count; ++i) avg[i] = a * avg[i] + b * params[i];
}

State Ema::state() const { return encode(m_decay, m_updates, m_avg); }

State Ema::encode(double decay, std::uint64_t updates, const std::vector<float>& avg) {
  State s;
  s.put("decay", decay);
  s.put("count", std::uint64_t{avg.size()});
  s.put("updates", updates);
  s.put("avg", avg);
  return s;
}

void Ema::restore(const State& s) {
  check_same(s, "decay", "optim.ema", m_decay);
  check_count(s, m_avg.size());
  const auto updates = s.get<std::uint64_t>("updates");
  m_avg = buffer(s, "avg", m_avg.size());
  m_updates = updates;
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

ScheduleOptions schedule_options(const config::OptimConfig& c, double total_epochs) {
  ScheduleOptions s;
  s.name = c.schedule;
  s.base_lr = c.lr;
  s.decay_rate = c.decay_rate;
  s.decay_epochs = c.decay_epochs;
  s.anneal_epochs = c.anneal_epochs;
  s.warmup_epochs = c.warmup_epochs;
  s.final_lr = c.final_lr;
  s.total_epochs = total_epochs;
  return s;
}

}  // namespace syncopt::optim
