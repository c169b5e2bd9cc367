// Evaluation and its log (see evaluation.hpp).
#include "train/evaluation.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <vector>

#include "common/error.hpp"
#include "metrics/run_board.hpp"

namespace syncopt::train {

EvalResult evaluate(nn::Network& net, const float* params, const data::Dataset& data) {
  const int max_batch = net.max_batch();
  std::vector<float> logits(static_cast<std::size_t>(max_batch) * data.classes);
  // A set on disk is read a batch at a time; one in memory is used in place.
  std::vector<float> images;
  if (!data.in_memory()) images.resize(static_cast<std::size_t>(max_batch * data.image_size()));
  double loss_sum = 0.0;
  std::int64_t correct = 0;
  for (std::int64_t start = 0; start < data.count; start += max_batch) {
    const int n = static_cast<int>(std::min<std::int64_t>(max_batch, data.count - start));
    const float* batch = data.in_memory() ? data.image(start) : images.data();
    if (!data.in_memory()) data.read(start, n, images.data());
    net.predict(params, batch, n, logits.data());
    for (int i = 0; i < n; ++i) {
      const float* z = logits.data() + static_cast<std::size_t>(i) * data.classes;
      const int label = data.labels[static_cast<std::size_t>(start + i)];
      const float zmax = *std::max_element(z, z + data.classes);
      double sum = 0.0;
      for (int k = 0; k < data.classes; ++k) sum += std::exp(static_cast<double>(z[k] - zmax));
      loss_sum += std::log(sum) - static_cast<double>(z[label] - zmax);
      if (std::max_element(z, z + data.classes) - z == label) ++correct;
    }
  }
  EvalResult r;
  if (data.count > 0) {
    r.loss = loss_sum / static_cast<double>(data.count);
    r.accuracy = static_cast<double>(correct) / static_cast<double>(data.count);
  }
  return r;
}

EvalLog::EvalLog(nn::Network& net, const data::Dataset& test, metrics::JsonlWriter& log,
                 double train_count, bool use_ema, const RunClock& clock)
    : m_net(net),
      m_test(test),
      m_log(log),
      m_train_count(train_count),
      m_use_ema(use_ema),
      m_clock(clock) {}

EvalPoint EvalLog::run(std::uint64_t step, std::uint64_t examples, const float* theta,
                       const float* ema, double wall_s) {
  EvalPoint p;
  p.step = step;
  p.examples = examples;
  const double t0 = m_clock.now();
  // Batch norm: each parameter vector with its own statistics, never θ̄
  // with θ's (docs/bn.md).
  auto with_statistics = [&](const float* params) {
    if (m_net.has_batch_norm()) {
      if (m_bn_batches == 0) {
        throw InternalError("EvalLog: a model with batch norm needs set_batch_norm_set()");
      }
      m_net.set_batch_norm_statistics(params, m_bn_images.data(), m_bn_batch, m_bn_batches);
    }
    return evaluate(m_net, params, m_test);
  };
  p.theta = with_statistics(theta);
  p.ema = m_use_ema ? with_statistics(ema) : p.theta;
  const double t1 = m_clock.now();
  p.eval_s = t1 - t0;
  p.wall_s = wall_s >= 0.0 ? wall_s : t1;
  m_log.write({{"step", p.step},
               {"wall_s", p.wall_s},
               {"examples", p.examples},
               {"epoch", static_cast<double>(p.examples) / m_train_count},
               {"test_loss", p.theta.loss},
               {"test_acc", p.theta.accuracy},
               {"test_loss_ema", p.ema.loss},
               {"test_acc_ema", p.ema.accuracy}});
  m_log.flush();
  if (m_board) {
    m_board->eval({p.step, p.wall_s, p.theta.loss, p.theta.accuracy, p.ema.loss, p.ema.accuracy});
    m_board->flush();
  }
  return p;
}

std::vector<float> batch_norm_images(const data::Dataset& train, int& batch, int& batches,
                                     std::uint64_t seed) {
  batch = static_cast<int>(std::min<std::int64_t>(batch, train.count));
  batches = static_cast<int>(std::min<std::int64_t>(batches, train.count / batch));
  // The first examples of a seeded permutation (its own stream, apart from
  // the training order's), without augmentation.
  std::vector<std::int64_t> order(static_cast<std::size_t>(train.count));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::mt19937_64 rng(seed ^ 0x6b6e5f6261746368ULL);
  const std::size_t take = static_cast<std::size_t>(batch) * batches;
  for (std::size_t i = 0; i < take; ++i) {  // a partial Fisher-Yates shuffle
    const std::size_t j = i + static_cast<std::size_t>(rng() % (order.size() - i));
    std::swap(order[i], order[j]);
  }
  const auto size = static_cast<std::size_t>(train.image_size());
  std::vector<float> images(take * size);
  for (std::size_t i = 0; i < take; ++i) train.read(order[i], 1, images.data() + i * size);
  return images;
}

void EvalLog::set_batch_norm_set(const data::Dataset& train, int batch, int batches,
                                 std::uint64_t seed) {
  if (!m_net.has_batch_norm() || train.count == 0) return;
  m_bn_batch = batch;
  m_bn_batches = batches;
  m_bn_images = batch_norm_images(train, m_bn_batch, m_bn_batches, seed);
}

std::string EvalLog::describe(const EvalPoint& p) const {
  char line[200];
  std::snprintf(line, sizeof(line),
                "eval at step %llu (epoch %.2f): test_acc %.2f%% (EMA %.2f%%), test loss %.4f, "
                "%.1fs",
                static_cast<unsigned long long>(p.step),
                static_cast<double>(p.examples) / m_train_count, 100.0 * p.theta.accuracy,
                100.0 * p.ema.accuracy, p.theta.loss, p.eval_s);
  return line;
}

}  // namespace syncopt::train
