// Adaptive N (see adaptive.hpp).
#include "ps/adaptive.hpp"

#include <algorithm>
#include <numeric>

namespace syncopt::ps {

namespace {
// A version's arrivals are taken as complete this many versions after it
// was applied (its late gradients have come by then, or never will).
constexpr std::uint64_t kSettle = 2;
}  // namespace

AdaptiveN::AdaptiveN(int workers, int initial_n, int window, double min_gain)
    : m_workers(workers), m_live(workers), m_n(initial_n), m_window(window), m_min_gain(min_gain) {}

void AdaptiveN::on_arrival(std::uint64_t version, double arrival_s) {
  m_open[version].push_back(arrival_s);
}

void AdaptiveN::set_live(int live) {
  m_live = live;
  m_n = std::min(m_n, std::max(1, live));
}

void AdaptiveN::on_applied(std::uint64_t version, double overhead_s) {
  m_overhead.push_back(overhead_s);
  while (m_overhead.size() > history()) m_overhead.pop_front();
  // Versions settled by now move to the window.
  while (!m_open.empty() && m_open.begin()->first + kSettle <= version) {
    auto arrivals = std::move(m_open.begin()->second);
    m_open.erase(m_open.begin());
    std::sort(arrivals.begin(), arrivals.end());
    m_complete.push_back(std::move(arrivals));
    if (m_complete.size() > history()) m_complete.pop_front();
  }
  if (++m_applied % static_cast<std::uint64_t>(m_window) == 0) decide();
}

std::vector<double> AdaptiveN::rates() const {
  std::vector<double> out(static_cast<std::size_t>(m_workers), 0.0);
  if (m_complete.size() < static_cast<std::size_t>(m_window) / 2 || m_overhead.empty()) return out;
  const double c = std::accumulate(m_overhead.begin(), m_overhead.end(), 0.0) /
                   static_cast<double>(m_overhead.size());
  for (int k = 1; k <= m_live; ++k) {
    // E[t_(k)] over the versions that had k arrivals; a version with fewer
    // (a worker skipped it, too late even for the next) says t_(k) is large:
    // it counts with its last arrival doubled, a conservative guess.
    double sum = 0.0;
    for (const auto& a : m_complete) {
      sum += static_cast<int>(a.size()) >= k ? a[static_cast<std::size_t>(k - 1)]
             : a.empty()                     ? 0.0
                                             : 2.0 * a.back();
    }
    const double t = sum / static_cast<double>(m_complete.size()) + c;
    out[static_cast<std::size_t>(k - 1)] = t > 0.0 ? k / t : 0.0;
  }
  return out;
}

// The highest rate is a noisy estimate, and progress per update grows less
// than linearly with N (the paper's iterations-to-converge fall more slowly
// than 1/N), so among the N whose rate is within min_gain of the best the
// smallest is taken. N moves down to it, or away from a current N that has
// fallen out of that band; a current N inside the band with no smaller one
// beside it stays (no flapping between near-equal rates).
void AdaptiveN::decide() {
  const auto r = rates();
  if (r[static_cast<std::size_t>(m_n - 1)] <= 0.0) return;
  const double best = *std::max_element(r.begin(), r.end());
  const double floor = best * (1.0 - m_min_gain);
  int smallest = m_n;
  for (int k = 1; k <= m_live; ++k) {
    if (r[static_cast<std::size_t>(k - 1)] >= floor) {
      smallest = k;
      break;
    }
  }
  if (r[static_cast<std::size_t>(m_n - 1)] < floor || smallest < m_n) m_n = smallest;
}

}  // namespace syncopt::ps
