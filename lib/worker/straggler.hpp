// Seeded straggler injection (docs/design.md §7): the extra delay a worker waits
// after computing its gradient for a step, so that runs with stragglers are
// reproducible. The delay depends only on (seed, worker, step) and the
// step's measured compute time.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace syncopt::worker {

class StragglerModel {
 public:
  // Reads the trace file (model "trace") at construction: a steps.jsonl of an
  // earlier run (every gradient's worker and arrival_s, in step order) or a
  // CSV with lines "worker,arrival_s". MissingInputError / DataError on a bad
  // file, naming it.
  explicit StragglerModel(const config::StragglerConfig& cfg);

  // Extra seconds worker `worker` waits at its `step` (0-based) after a
  // compute of `compute_s` seconds:
  //   bernoulli:   with probability prob, (factor - 1) * compute_s
  //   fixed:       (factor - 1) * compute_s + mean_ms, always (a slow worker:
  //                a multiple of its compute, plus a constant extra delay)
  //   exponential: Exp(mean_ms)
  //   lognormal:   LogNormal with mean mean_ms and shape sigma
  //   pareto:      Pareto with shape alpha and mean mean_ms
  //   trace:       max(0, recorded arrival - compute_s), cycling the worker's record
  // and 0 for workers not in stragglers.workers (empty list = all).
  double delay_s(int worker, std::uint64_t step, double compute_s) const;

  bool active() const { return m_cfg.model != config::StragglerModel::kNone; }

 private:
  bool affects(int worker) const;
  config::StragglerConfig m_cfg;
  std::map<int, std::vector<double>> m_trace;  // worker -> arrival times (s)
};

// Uniform in [0, 1) from (seed, worker, step, stream): splitmix64 hashing,
// identical on every machine.
double hash_uniform(std::uint64_t seed, std::uint64_t worker, std::uint64_t step,
                    std::uint64_t stream);

}  // namespace syncopt::worker
