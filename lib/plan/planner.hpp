// `syncopt plan`: which N of K workers (b = K - N backups) reaches a target
// accuracy soonest (the paper's §4: they estimated N = 96, b = 4 best of 100
// machines from their measured arrival times). Plain data, tested exactly:
//
//   time(N) = I(N) * T(N, K - N)
//
// T(N, b)  seconds per update with the first N of N + b gradients: the time
//          to the N-th arrival of a step plus the update (sources.hpp: from
//          runs' records or from simulations of the arrival model);
// I(N)     updates to reach the target test accuracy with N gradients per
//          update; larger N averages more and needs fewer updates. Model:
//            I(N) = a + c / N
//          (the noise of the mean gradient falls as 1/N; a is what no batch
//          size removes), fitted by least squares to runs at several N or
//          given. The paper's Inception runs, 137.5k updates at N = 50 and
//          76.2k at N = 100, give a = 14.9k, c = 6.13M.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace syncopt::plan {

struct ItersModel {
  double a = 0.0, c = 0.0;
  std::string source;                          // where a and c came from
  std::vector<std::pair<int, double>> points;  // (N, updates) measured, if fitted
  double at(int n) const { return a + c / static_cast<double>(n); }
};

// Least squares of I = a + c / N over `points` (N, updates): DataError
// unless they hold at least two distinct N.
ItersModel fit_iters(const std::vector<std::pair<int, double>>& points);

struct Row {
  int n = 0, b = 0;
  double step_s = 0.0;  // T(N, b)
  double iters = 0.0;   // I(N)
  double time_s = 0.0;  // I(N) * T(N, b)
};

struct Plan {
  int workers = 0;  // K
  double target_acc = 0.0;
  ItersModel iters;
  std::string step_source;  // where T came from
  std::vector<Row> rows;    // in N order, for every N with a T
  Row best;                 // the least time (ties: the larger N)
};

// T(N, K - N) for the N in `step_s` (N -> seconds per update; 1 <= N <= K).
// DataError when `step_s` holds no N in range.
Plan choose(int workers, const std::map<int, double>& step_s, const ItersModel& iters);

nlohmann::json to_json(const Plan& plan);
// The table `syncopt plan` prints, with the best row marked.
std::string format(const Plan& plan);

}  // namespace syncopt::plan
