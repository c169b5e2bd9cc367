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
  config::OptimizerName name = config::OptimizerName::kSgd;
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
  // The same update on params[offset, offset + count) alone (grad holds that
  // range's count floats): updating a slice range by range gives the bits
  // of one step() (the pipelined exchange applies a shard's slice bucket
  // by bucket).
  void step_range(float* params, const float* grad, float lr, std::size_t offset,
                  std::size_t count);
  std::size_t count() const { return m_count; }
  const std::vector<float>& momentum_buffer() const { return m_mom; }
  const std::vector<float>& mean_square_buffer() const { return m_ms; }  // rmsprop; else empty

  // The buffers (momentum; rmsprop's mean square) and the options they were
  // built with. restore() takes a state() of an optimiser with the same
  // options and count: another name, momentum, decay, eps, weight decay or
  // count is a ConfigError (the run was resumed with other settings), a
  // damaged state a DataError naming the field.
  checkpoint::State state() const;
  void restore(const checkpoint::State& s);
  // The state of an optimiser with these options whose buffers live
  // elsewhere (the CUDA replica's, downloaded): `ms` for rmsprop only.
  static checkpoint::State encode(const OptimizerOptions& opt, const std::vector<float>& mom,
                                  const std::vector<float>* ms);

 private:
  OptimizerOptions m_opt;
  std::size_t m_count;
  std::vector<float> m_mom;  // momentum accumulator
  std::vector<float> m_ms;   // rmsprop: running mean of g^2
};

struct ScheduleOptions {
  config::Schedule name = config::Schedule::kConstant;
  double base_lr = 0.05;
  double decay_rate = 0.94;
  double decay_epochs = 2.0;
  double anneal_epochs = 0.0;  // 0 = anneal over the whole run
  double warmup_epochs = 0.0;
  double final_lr = 0.0;      // exponential: the floor; linear_anneal: the end value
  double total_epochs = 1.0;  // length of the run in epochs of accepted examples
};

// Learning rate at a point of the run, `epoch` = accepted examples / train
// set size (fractional). Pure function so every shard computes the same lr.
//   constant:      lr
//   exponential:   max(final_lr, lr * decay_rate ^ floor(epoch / decay_epochs))
//   linear_anneal: final_lr + (lr - final_lr) * clamp((total - epoch) / E, 0, 1),
//                  E = anneal_epochs or total
//   warmup_X:      X * min(1, epoch / warmup_epochs)
// The trainer multiplies it by the update's lr multiplier (N under
// optim.scale_lr_by_n: config::UpdateRule::lr_multiplier).
double learning_rate(const ScheduleOptions& s, double epoch);

// Exponential moving average of the parameters (Polyak averaging):
//   avg <- a_t * avg + (1 - a_t) * p,  a_t = min(decay, (1 + t) / (10 + t))
// t = number of updates folded in so far, so short runs still get a useful
// average (TensorFlow's ExponentialMovingAverage with num_updates).
class Ema {
 public:
  Ema(double decay, const float* initial, std::size_t count);
  // update_range over everything, then advance().
  void update(const float* params);
  // Folds params[offset, offset + count) in with the current t; advance()
  // then counts the update (t += 1) once every range of it is folded in.
  void update_range(const float* params, std::size_t offset, std::size_t count);
  void advance() { ++m_updates; }
  const float* data() const { return m_avg.data(); }
  std::size_t count() const { return m_avg.size(); }
  std::uint64_t updates() const { return m_updates; }
  double decay() const { return m_decay; }

  // The average and the update count t (the warm-up decay depends on it).
  // restore() needs the same decay and count (else ConfigError).
  checkpoint::State state() const;
  void restore(const checkpoint::State& s);
  // The state of an EMA held elsewhere (the CUDA replica's, downloaded).
  static checkpoint::State encode(double decay, std::uint64_t updates,
                                  const std::vector<float>& avg);

 private:
  double m_decay;
  std::uint64_t m_updates = 0;
  std::vector<float> m_avg;
};

// The optimiser and schedule of an [optim] config section. total_epochs is
// the run's length in epochs of accepted examples.
OptimizerOptions optimizer_options(const config::OptimConfig& c);
ScheduleOptions schedule_options(const config::OptimConfig& c, double total_epochs);

}  // namespace syncopt::optim
