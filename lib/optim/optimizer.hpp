// Optimisers, learning-rate schedules and the parameter EMA, all on flat
// float slices so that a parameter-server shard can own its own part. The
// optimiser and the EMA hand their state to checkpoints as a
// checkpoint::State (state() / restore()).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/state.hpp"
#include "config/config.hpp"

namespace syncopt::optim {

struct OptimizerOptions {
  std::string name = "sgd";  // sgd | rmsprop
  double momentum = 0.9;
  double rms_decay = 0.9;
  double eps = 1e-8;
  double weight_decay = 0.0;  // L2, added to the gradient
};

// Update rules (per element i, gradient g_i, learning rate lr):
//   sgd:     m_i <- momentum * m_i + g_i;           p_i <- p_i - lr * m_i
//            (PyTorch's convention: lr scales the step, not the accumulator,
//             so a schedule change takes effect at once)
//   rmsprop: s_i <- d * s_i + (1 - d) * g_i^2;      (d = rms_decay, s_0 = 1 as in TF)
//            m_i <- momentum * m_i + lr * g_i / sqrt(s_i + eps);  p_i <- p_i - m_i
//            (TensorFlow's RMSPropOptimizer with momentum, the paper's optimiser)
class Optimizer {
 public:
  Optimizer(const OptimizerOptions& opt, std::size_t count);
  // params, grad: [count] floats. Applies one update with learning rate lr.
  void step(float* params, const float* grad, float lr);
  std::size_t count() const { return m_count; }
  const std::vector<float>& momentum_buffer() const { return m_mom; }

  // The buffers (momentum; rmsprop's mean square) and the options they were
  // built with. restore() takes a state() of an optimiser with the same
  // options and count: another name, momentum, decay, eps, weight decay or
  // count is a ConfigError (the run was resumed with other settings), a
  // damaged state a DataError naming the field.
  checkpoint::State state() const;
  void restore(const checkpoint::State& s);

 private:
  OptimizerOptions m_opt;
  std::size_t m_count;
  std::vector<float> m_mom;  // momentum accumulator
  std::vector<float> m_ms;   // rmsprop: running mean of g^2
};

// The shape of a learning-rate schedule, optim.schedule without "warmup_".
enum class Schedule { kConstant, kExponential, kLinearAnneal };

// optim.schedule parsed once, when it is set: learning_rate() runs every
// update and branches on shape() and warmup(), never on the name.
// Implicit from a name so options read like the config key
// (`s.name = "warmup_exponential"`). An unknown name is kept as such
// (known() is false) and learning_rate() rejects it with a ConfigError, the
// contract of hand-built ScheduleOptions from before the enum;
// schedule_options() and parse_schedule() reject it at once.
class ScheduleName {
 public:
  ScheduleName(std::string_view name = "constant");
  ScheduleName(const char* name) : ScheduleName(std::string_view(name)) {}
  ScheduleName(const std::string& name) : ScheduleName(std::string_view(name)) {}
  const std::string& str() const { return m_name; }
  bool known() const { return m_known; }
  Schedule shape() const { return m_shape; }
  bool warmup() const { return m_warmup; }

 private:
  std::string m_name;
  Schedule m_shape = Schedule::kConstant;
  bool m_warmup = false;
  bool m_known = false;
};

// A known schedule name, else ConfigError listing the known ones.
ScheduleName parse_schedule(std::string_view name);

struct ScheduleOptions {
  ScheduleName name = "constant";  // constant | exponential | linear_anneal | warmup_constant |
                                   // warmup_linear_anneal | warmup_exponential
  double base_lr = 0.05;
  double decay_rate = 0.94;
  double decay_epochs = 2.0;
  double anneal_epochs = 0.0;  // 0 = anneal over the whole run
  double warmup_epochs = 0.0;
  double final_lr = 0.0;       // exponential: the floor; linear_anneal: the end value
  double total_epochs = 1.0;   // length of the run in epochs of accepted examples
  double lr_multiplier = 1.0;  // N when optim.scale_lr_by_n, else 1
};

// Learning rate at a point of the run, `epoch` = accepted examples / train
// set size (fractional). Pure function so every shard computes the same lr.
//   constant:      lr
//   exponential:   max(final_lr, lr * decay_rate ^ floor(epoch / decay_epochs))
//   linear_anneal: final_lr + (lr - final_lr) * clamp((total - epoch) / E, 0, 1),
//                  E = anneal_epochs or total
//   warmup_X:      X * min(1, epoch / warmup_epochs)
// all times lr_multiplier.
double learning_rate(const ScheduleOptions& s, double epoch);

// Exponential moving average of the parameters (Polyak averaging):
//   avg <- a_t * avg + (1 - a_t) * p,  a_t = min(decay, (1 + t) / (10 + t))
// t = number of updates folded in so far, so short runs still get a useful
// average (TensorFlow's ExponentialMovingAverage with num_updates).
class Ema {
 public:
  Ema(double decay, const float* initial, std::size_t count);
  void update(const float* params);
  const float* data() const { return m_avg.data(); }
  std::size_t count() const { return m_avg.size(); }
  std::uint64_t updates() const { return m_updates; }
  double decay() const { return m_decay; }

  // The average and the update count t (the warm-up decay depends on it).
  // restore() needs the same decay and count (else ConfigError).
  checkpoint::State state() const;
  void restore(const checkpoint::State& s);

 private:
  double m_decay;
  std::uint64_t m_updates = 0;
  std::vector<float> m_avg;
};

// The optimiser and schedule of an [optim] config section. total_epochs is
// the run's length in epochs of accepted examples; lr_multiplier is N when
// optim.scale_lr_by_n (1 otherwise). An unknown optim.schedule is a
// ConfigError here, before the first update.
OptimizerOptions optimizer_options(const config::OptimConfig& c);
ScheduleOptions schedule_options(const config::OptimConfig& c, double total_epochs,
                                 double lr_multiplier);

}  // namespace syncopt::optim
