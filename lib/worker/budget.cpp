// The compute budget of allreduce (see budget.hpp).
#include "worker/budget.hpp"

#include <algorithm>
#include <cmath>

namespace syncopt::worker {

ComputeBudget::ComputeBudget(const config::TrainConfig& train)
    : m_batch(static_cast<int>(train.batch)),
      m_micro(static_cast<int>(std::min(train.micro_batch, train.batch))),
      m_auto(config::is_auto(train.compute_budget_ms)),
      m_keep(train.compute_budget_keep) {
  m_count = m_micro > 0 ? (m_batch + m_micro - 1) / m_micro : 1;
  if (!m_auto && std::get<double>(train.compute_budget_ms) > 0.0 && m_micro > 0) {
    m_budget_s = std::get<double>(train.compute_budget_ms) / 1000.0;
  }
}

int ComputeBudget::size_of(int i) const {
  if (m_micro == 0) return m_batch;
  return std::min(m_micro, m_batch - i * m_micro);
}

int ComputeBudget::examples_of(int n) const {
  if (m_micro == 0) return n > 0 ? m_batch : 0;
  return std::min(m_batch, n * m_micro);
}

bool ComputeBudget::next(int done, double elapsed_s, double last_s) const {
  if (done >= m_count) return false;
  if (done < 1 || !std::isfinite(m_budget_s)) return true;
  const double per_example = last_s / size_of(done - 1);
  return elapsed_s + per_example * size_of(done) <= m_budget_s;
}

void ComputeBudget::observe(const std::vector<double>& per_example_s) {
  if (!m_auto || m_micro == 0) return;
  m_recent.push_back(per_example_s);
  if (m_recent.size() > kWindow) m_recent.pop_front();
  choose();
}

// "auto" (docs/design.md §3): over the recent steps, a budget T would have
// let a rank of u seconds per example compute n(T) micro-batches, the most
// whose examples end within T (at least one), and the step would have
// lasted the longest of its ranks' times. Of the candidate budgets (the end
// of every rank's every micro-batch in those steps), the largest whose rate
// (examples computed / seconds of the steps) is within kRateSlack of the
// best, among those keeping at least compute_budget_keep of the examples;
// none keeping that many: the one keeping most.
void ComputeBudget::choose() {
  std::vector<double> ends;
  for (const auto& step : m_recent) {
    for (const double u : step) {
      for (int n = 1; n <= m_count; ++n) ends.push_back(u * examples_of(n));
    }
  }
  std::sort(ends.begin(), ends.end());
  ends.erase(std::unique(ends.begin(), ends.end()), ends.end());
  std::vector<double> candidates;
  const std::size_t stride = std::max<std::size_t>(1, ends.size() / kCandidates);
  for (std::size_t i = 0; i < ends.size(); i += stride) candidates.push_back(ends[i]);
  if (!ends.empty() && candidates.back() != ends.back()) candidates.push_back(ends.back());
  struct Score {
    double budget, rate, kept;
  };
  std::vector<Score> scores;
  double all = 0.0;
  for (const auto& step : m_recent) all += static_cast<double>(step.size()) * m_batch;
  for (const double t : candidates) {
    double kept = 0.0, seconds = 0.0;
    for (const auto& step : m_recent) {
      double longest = 0.0;
      for (const double u : step) {
        int n = 1;
        while (n < m_count && u * examples_of(n + 1) <= t) ++n;
        kept += examples_of(n);
        longest = std::max(longest, u * examples_of(n));
      }
      seconds += longest;
    }
    scores.push_back({t, seconds > 0.0 ? kept / seconds : 0.0, all > 0.0 ? kept / all : 1.0});
  }
  double best = 0.0, most = 0.0;
  for (const Score& s : scores) {
    if (s.kept + 1e-12 >= m_keep) best = std::max(best, s.rate);
    most = std::max(most, s.kept);
  }
  double chosen = candidates.empty() ? std::numeric_limits<double>::infinity() : 0.0;
  for (const Score& s : scores) {
    const bool eligible = best > 0.0
                              ? s.kept + 1e-12 >= m_keep && s.rate >= (1.0 - kRateSlack) * best
                              : s.kept >= most;
    if (eligible) chosen = std::max(chosen, s.budget);
  }
  m_budget_s = chosen;
}

}  // namespace syncopt::worker
