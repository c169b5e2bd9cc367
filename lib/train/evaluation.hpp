// Test-set evaluation, the one evaluate-and-log that every mode uses: the
// accuracy of θ and of its EMA θ̄, appended to eval.jsonl, and when it is due.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.hpp"
#include "config/config.hpp"
#include "data/dataset.hpp"
#include "metrics/records.hpp"
#include "nn/backend.hpp"

namespace syncopt::metrics {
class RunBoard;
}

namespace syncopt::train {

struct EvalResult {
  double loss = 0.0;
  double accuracy = 0.0;  // fraction in [0, 1]
};

// Mean cross-entropy and accuracy of `params` on all of `data`, in batches of
// at most net.max_batch().
EvalResult evaluate(nn::Network& net, const float* params, const data::Dataset& data);

struct EvalPoint {
  std::uint64_t step = 0;
  double wall_s = 0.0;
  std::uint64_t examples = 0;
  EvalResult theta, ema;
  double eval_s = 0.0;  // how long the evaluation took
};

// Evaluates θ and θ̄ and appends one eval.jsonl record:
//   {"step", "wall_s", "examples", "epoch", "test_loss", "test_acc",
//    "test_loss_ema", "test_acc_ema"}.
// The batch-norm set of `train` (docs/bn.md): the first batch * batches
// examples of a permutation seeded by `seed` (its own stream, apart from the
// training order's), without augmentation, as [n, C, H, W]; batch and
// batches are lowered to what the set holds. What EvalLog and an exported
// model (train/weights.hpp) compute batch-norm statistics on.
std::vector<float> batch_norm_images(const data::Dataset& train, int& batch, int& batches,
                                     std::uint64_t seed);

class EvalLog {
 public:
  // use_ema = false: θ̄ is θ (no second evaluation). wall_s is read from
  // `clock` once the evaluation is done.
  EvalLog(nn::Network& net, const data::Dataset& test, metrics::JsonlWriter& log,
          double train_count, bool use_ema, const RunClock& clock);
  // Each evaluation also goes to `board` (TensorBoard's eval/* tags, flushed
  // at once; nullptr: none), which may be shared with the rank's StepLog.
  void set_board(std::shared_ptr<metrics::RunBoard> board) { m_board = std::move(board); }
  // A model with batch norm is evaluated with statistics of its own
  // (docs/bn.md): before θ and, apart, before θ̄ are evaluated, their
  // statistics are computed on the same `batches` batches of `batch`
  // training examples, drawn once from `train` by `seed` (fewer when the set
  // is smaller). Needed before run() for such a model.
  void set_batch_norm_set(const data::Dataset& train, int batch, int batches, std::uint64_t seed);
  // wall_s >= 0 is recorded instead of the clock (the end of training, for
  // the final evaluation).
  EvalPoint run(std::uint64_t step, std::uint64_t examples, const float* theta, const float* ema,
                double wall_s = -1.0);
  // "eval at step 300 (epoch 0.64): test_acc 85.10% (EMA 86.02%), test loss 0.4123"
  std::string describe(const EvalPoint& p) const;

 private:
  nn::Network& m_net;
  const data::Dataset& m_test;
  metrics::JsonlWriter& m_log;
  double m_train_count;
  bool m_use_ema;
  const RunClock& m_clock;
  std::shared_ptr<metrics::RunBoard> m_board;
  std::vector<float> m_bn_images;  // [m_bn_batches * m_bn_batch, C, H, W]
  int m_bn_batch = 0, m_bn_batches = 0;
};

// When to evaluate during training: every eval.every_steps updates, or
// when eval.every_s seconds have passed since the last evaluation.
class EvalTimer {
 public:
  explicit EvalTimer(const config::EvalConfig& cfg)
      : m_every_steps(static_cast<std::uint64_t>(cfg.every_steps)), m_every_s(cfg.every_s) {}
  bool enabled() const { return m_every_steps > 0 || m_every_s > 0.0; }
  bool due(std::uint64_t step, double now) const {
    return (m_every_steps > 0 && step % m_every_steps == 0) ||
           (m_every_s > 0.0 && now - m_last_s >= m_every_s);
  }
  void mark(double now) { m_last_s = now; }
  double last() const { return m_last_s; }

 private:
  std::uint64_t m_every_steps;
  double m_every_s;
  double m_last_s = 0.0;
};

}  // namespace syncopt::train
