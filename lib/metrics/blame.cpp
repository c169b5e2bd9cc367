// Which rank is slow, and at what (see blame.hpp).
#include "metrics/blame.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>

namespace syncopt::metrics {

double own_work_s(const PhaseTimes& p) {
  double work = 0.0;
  for (std::size_t i = 0; i < kPhaseCount; ++i) {
    const auto phase = static_cast<Phase>(i);
    if (p.has(phase) && !waits_for_others(phase)) work += p.get(phase);
  }
  return work;
}

std::vector<StepScore> score_step(const StepRecord& r) {
  std::vector<StepScore> out;
  double least = std::numeric_limits<double>::infinity();
  for (const GradRecord& g : r.grads) {
    if (g.phases.empty()) continue;
    out.push_back({g.worker, own_work_s(g.phases), 1.0});
    least = std::min(least, out.back().work_s);
  }
  for (StepScore& s : out) s.relative = least > 0.0 ? s.work_s / least : 1.0;
  return out;
}

void Blame::add(const StepRecord& r) {
  const std::vector<StepScore> scores = score_step(r);
  if (scores.empty()) return;
  // The least of each phase in this step, over the ranks that measured it.
  std::array<double, kPhaseCount> best;
  best.fill(std::numeric_limits<double>::infinity());
  for (const GradRecord& g : r.grads) {
    for (std::size_t p = 0; p < kPhaseCount; ++p) {
      if (g.phases.has(static_cast<Phase>(p))) best[p] = std::min(best[p], g.phases.s[p]);
    }
  }
  std::size_t i = 0;
  for (const GradRecord& g : r.grads) {
    if (g.phases.empty()) continue;
    const StepScore& s = scores[i++];
    Rank& rank = m_ranks[g.worker];
    rank.work_min = rank.steps == 0 ? s.work_s : std::min(rank.work_min, s.work_s);
    ++rank.steps;
    rank.relative_sum += s.relative;
    rank.work_sum += s.work_s;
    for (std::size_t p = 0; p < kPhaseCount; ++p) {
      if (!g.phases.has(static_cast<Phase>(p))) continue;
      rank.phase_sum[p] += g.phases.s[p];
      rank.best_sum[p] += best[p];
    }
  }
}

void Blame::put_summary(nlohmann::json& summary) const {
  using nlohmann::json;
  if (m_ranks.empty()) {
    for (const char* key : {"relative_score_per_worker", "individual_score_per_worker",
                            "slow_phase_per_worker", "slowest_workers"}) {
      summary[key] = nullptr;
    }
    return;
  }
  json relative = json::array(), individual = json::array(), phase = json::array();
  struct Named {
    int worker;
    double relative, individual, excess;
    std::string phase;
  };
  std::vector<Named> named;
  for (int w = 0; w < m_workers; ++w) {
    const auto it = m_ranks.find(w);
    if (it == m_ranks.end() || it->second.steps == 0) {
      relative.push_back(nullptr);
      individual.push_back(nullptr);
      phase.push_back(nullptr);
      continue;
    }
    const Rank& r = it->second;
    const auto n = static_cast<double>(r.steps);
    const double mean_work = r.work_sum / n;
    Named x{w, r.relative_sum / n, r.work_min > 0.0 ? mean_work / r.work_min : 1.0, 0.0, ""};
    for (std::size_t p = 0; p < kPhaseCount; ++p) {
      if (waits_for_others(static_cast<Phase>(p))) continue;
      const double excess = (r.phase_sum[p] - r.best_sum[p]) / n;
      if (x.phase.empty() || excess > x.excess) {
        x.excess = excess;
        x.phase = kPhaseNames[p];
      }
    }
    relative.push_back(x.relative);
    individual.push_back(x.individual);
    phase.push_back(x.phase);
    named.push_back(std::move(x));
  }
  std::stable_sort(named.begin(), named.end(),
                   [](const Named& a, const Named& b) { return a.relative > b.relative; });
  json slowest = json::array();
  for (std::size_t i = 0; i < named.size() && i < 3; ++i) {
    slowest.push_back({{"worker", named[i].worker},
                       {"relative", named[i].relative},
                       {"individual", named[i].individual},
                       {"phase", named[i].phase},
                       {"phase_excess_s", named[i].excess}});
  }
  summary["relative_score_per_worker"] = relative;
  summary["individual_score_per_worker"] = individual;
  summary["slow_phase_per_worker"] = phase;
  summary["slowest_workers"] = slowest;
}

std::string format_blame(const nlohmann::json& summary) {
  const auto it = summary.find("slowest_workers");
  if (it == summary.end() || !it->is_array() || it->empty()) return "";
  std::string out =
      "slowest workers (own work a step against the fastest rank's; waiting is not counted):\n";
  char line[200];
  for (const auto& s : *it) {
    std::snprintf(line, sizeof line,
                  "  worker %-4d %6.2fx the fastest, %6.2fx its own best; slow at %s "
                  "(+%.2f ms a step)\n",
                  s["worker"].get<int>(), s["relative"].get<double>(),
                  s["individual"].get<double>(), s["phase"].get<std::string>().c_str(),
                  1e3 * s["phase_excess_s"].get<double>());
    out += line;
  }
  return out;
}

}  // namespace syncopt::metrics
