// Seeded straggler injection (docs/design.md §7): how much slower a worker
// computes at a step, so that runs with stragglers are reproducible. The
// slowdown depends only on (seed, worker, step); a straggler is a slow
// machine, slow at every layer and every micro-batch it computes: its extra
// time is spread over the step's compute in proportion to the work done
// (StragglerPacer below), in the worker, the allreduce loop and the
// simulator alike.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "config/config.hpp"

namespace syncopt::worker {

// One step's slowdown: a compute of which a share phi of the step's work is
// done after e seconds of its own is late by
//   late_s(e, phi) = max((factor - 1) * e + extra_s * phi, pace_s * phi - e)
// so the whole step of c seconds takes c + late_s(c, 1), and
// StragglerModel::delay_s(c) = late_s(c, 1) (the same bits as ever).
struct Slowdown {
  double factor = 1.0;   // bernoulli (when drawn), fixed
  double extra_s = 0.0;  // fixed's mean_ms; exponential, lognormal, pareto
  double pace_s = 0.0;   // trace: the recorded arrival time
  double late_s(double e, double phi) const {
    const double d = (factor - 1.0) * e + extra_s * phi;
    return pace_s > 0.0 ? std::max(d, pace_s * phi - e) : d;
  }
  bool slows() const { return factor != 1.0 || extra_s > 0.0 || pace_s > 0.0; }
};

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
  // That is slowdown(worker, step).late_s(compute_s, 1).
  double delay_s(int worker, std::uint64_t step, double compute_s) const;
  // The step's slowdown (see Slowdown), from which delay_s follows.
  Slowdown slowdown(int worker, std::uint64_t step) const;

  bool active() const { return m_cfg.model != config::StragglerModel::kNone; }

 private:
  bool affects(int worker) const;
  config::StragglerConfig m_cfg;
  std::map<int, std::vector<double>> m_trace;  // worker -> arrival times (s)
};

// Spreads a step's slowdown over its compute (docs/design.md §7): at each
// point of progress the caller says how long it has computed so far (e,
// seconds of its own work: no waiting for messages, no sleeping) and what
// share phi of the step's work that is (a layer's forward or backward
// FLOPs, a micro-batch's examples); due_s() returns how long to sleep now
// so that the step is Slowdown::late_s(e, phi) late by then (never less
// than it already is: a pace overtaken stays overtaken). A step
// reported in pieces whose shares follow its compute (the simulator's
// layers) is thus (c + delay) * phi into its work at every point: the same
// straggler before and after a pipelined bucket leaves.
class StragglerPacer {
 public:
  void start(const Slowdown& s) {
    m_s = s;
    m_slept_s = 0.0;
  }
  double due_s(double e, double phi) {
    const double d = std::max(0.0, m_s.late_s(e, std::min(phi, 1.0)) - m_slept_s);
    m_slept_s += d;
    return d;
  }
  double slept_s() const { return m_slept_s; }
  bool active() const { return m_s.slows(); }

 private:
  Slowdown m_s;
  double m_slept_s = 0.0;
};

// Uniform in [0, 1) from (seed, worker, step, stream): splitmix64 hashing,
// identical on every machine.
double hash_uniform(std::uint64_t seed, std::uint64_t worker, std::uint64_t step,
                    std::uint64_t stream);

}  // namespace syncopt::worker
