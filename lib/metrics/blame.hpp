// Which rank is slow, and at what (docs/outputs.md, "The slow rank named"):
// from the phases every gradient's record carries (grads[].phases), each
// rank's own work in a step is the sum of its phases that are not waits
// for the others (a worker's data, forward, backward, sending; an allreduce
// rank's data and compute): its relative score is that against the least
// of any rank in the same step, its individual score that against its own
// least of the run. A rank that waits for a straggler waits in its wait or
// reduce phase, which no score counts: it is never blamed. The phase that
// makes a rank slow is the one with the largest excess over the fastest
// rank of each step at that phase.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "metrics/step_record.hpp"

namespace syncopt::metrics {

// A rank's own work in a step: the sum of its phases other than waits.
double own_work_s(const PhaseTimes& p);

struct StepScore {
  int worker = 0;
  double work_s = 0.0;
  double relative = 1.0;  // work / the least work of this step's ranks
};
// Every gradient of `r` with phases (empty when none has).
std::vector<StepScore> score_step(const StepRecord& r);

class Blame {
 public:
  explicit Blame(int workers) : m_workers(workers) {}
  // A record of shard 0 (each rank's step once).
  void add(const StepRecord& r);
  // summary.json's fields: relative_score_per_worker,
  // individual_score_per_worker, slow_phase_per_worker and slowest_workers
  // (the three with the highest relative score: worker, relative,
  // individual, phase, phase_excess_s); null when no record had phases.
  void put_summary(nlohmann::json& summary) const;

 private:
  struct Rank {
    std::int64_t steps = 0;
    double relative_sum = 0.0, work_sum = 0.0, work_min = 0.0;
    std::array<double, kPhaseCount> phase_sum{}, best_sum{};  // its phase; the step's least
  };
  int m_workers;
  std::map<int, Rank> m_ranks;
};

// The lines `syncopt report` prints from a summary's slowest_workers; empty
// when the summary has none.
std::string format_blame(const nlohmann::json& summary);

}  // namespace syncopt::metrics
