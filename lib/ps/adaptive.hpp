// Adaptive b (train.backups = "auto"): the decision of how many of the K
// workers' gradients an update should wait for, free of MPI so that it can
// be tested on synthetic arrival models.
//
// The aim is progress per second. With the lr scaled by N (the paper's rule,
// optim.scale_lr_by_n), an update of N gradients makes about N times the
// progress of one: rate(N) = N / (E[t_(N)] + c), where t_(N) is the time from
// a version's start to the N-th of its gradients (the order statistic the
// paper's Figure 3 shows) and c the per-update cost beyond it (aggregation,
// the optimiser, the answers). E[t_(k)] is the mean over the last `window`
// complete versions (four windows' worth) of every worker's arrival time
// for that version, late ones included (each worker computes one gradient
// per version). Every `window` versions the smallest N whose rate is within
// `min_gain` of the highest is taken (see decide(): the rates are noisy and
// progress per update grows less than linearly with N).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <vector>

namespace syncopt::ps {

class AdaptiveN {
 public:
  AdaptiveN(int workers, int initial_n, int window = 20, double min_gain = 0.03);

  // A gradient of `version` arrived `arrival_s` after that version began.
  void on_arrival(std::uint64_t version, double arrival_s);
  // Version `version` was applied; `overhead_s` is what the update took
  // beyond its N-th gradient. Versions older than a few are complete.
  void on_applied(std::uint64_t version, double overhead_s);
  // The live workers now (dead ones are not waited for).
  void set_live(int live);

  int n() const { return m_n; }
  // The estimated rate of each N (1..K), for records and tests; 0 where
  // there is no estimate yet.
  std::vector<double> rates() const;

 private:
  void decide();
  std::size_t history() const { return 4 * static_cast<std::size_t>(m_window); }

  int m_workers, m_live, m_n, m_window;
  double m_min_gain;
  std::map<std::uint64_t, std::vector<double>> m_open;  // version -> arrivals so far
  std::deque<std::vector<double>> m_complete;           // sorted arrivals of the last versions
  std::deque<double> m_overhead;
  std::uint64_t m_applied = 0;
};

}  // namespace syncopt::ps
