// Fitting the timing model to a real run's records (see fit.hpp).
#include "sim/fit.hpp"

#include <algorithm>
#include <map>
#include <vector>

#include "common/error.hpp"
#include "config/config.hpp"
#include "layout/roles.hpp"
#include "metrics/analysis.hpp"
#include "metrics/records.hpp"
#include "sim/poll.hpp"
#include "worker/straggler.hpp"

namespace syncopt::sim {

namespace {

struct Arrival {
  std::uint64_t seq = 0;
  double at = 0.0;  // run time
  std::uint64_t version = 0;
  double compute_s = 0.0;
};

// The shard loop's expected back-off wait for a message it saw at `seen`:
// half the sleep in progress, the loop having gone idle at the last pass
// end before it (`marks`: every update's end and every message's stamp,
// sorted). A message taken in the same pass as another waited for none.
double poll_wait(const std::vector<double>& marks, double seen, double poll_max_s) {
  const auto it = std::lower_bound(marks.begin(), marks.end(), seen);
  if (it == marks.begin()) return 0.0;
  return 0.5 * sleep_at(seen - *(it - 1), poll_max_s);
}

// One worker's (compute, overhead) pairs, from its arrivals sorted by seq.
// Ids of rounds: (version sent, moment answered) -> a number.
using Rounds = std::map<std::pair<std::uint64_t, double>, std::uint64_t>;

void add_pairs(int worker, const std::vector<Arrival>& arrivals,
               const std::map<std::uint64_t, double>& start_of,
               const worker::StragglerModel& stragglers, double floor_s,
               const std::vector<double>& marks, double poll_max_s, Rounds& rounds, Recorded& out) {
  for (std::size_t i = 1; i < arrivals.size(); ++i) {
    const Arrival& prev = arrivals[i - 1];
    const Arrival& cur = arrivals[i];
    if (cur.seq != prev.seq + 1) continue;  // a gradient the records miss
    const auto it = start_of.find(cur.version);
    if (it == start_of.end()) continue;
    const double answered = std::max(prev.at, it->second);
    const double delay = stragglers.delay_s(worker, cur.seq, cur.compute_s);
    const double wait = poll_wait(marks, cur.at, poll_max_s);
    const double overhead =
        std::max(0.0, cur.at - answered - cur.compute_s - delay - floor_s - wait);
    // Answered at the same moment with the same version: one pass's group
    // (the stamps are the same doubles, so they compare equal).
    const auto round = rounds.try_emplace({cur.version, answered}, rounds.size()).first->second;
    out.add(worker, round, {cur.compute_s, overhead});
  }
}

}  // namespace

Fit fit_run(const std::filesystem::path& run_dir, const TimingModel& base,
            const NetworkParams& network, std::size_t param_count, double poll_max_s) {
  const auto config_path = run_dir / "config.toml";
  const auto steps_path = run_dir / "steps.jsonl";
  for (const auto& p : {config_path, steps_path}) {
    if (!std::filesystem::exists(p)) {
      throw MissingInputError("--from " + run_dir.string() + ": '" + p.string() +
                              "' not found; give the directory of a finished real run "
                              "(runs/<name>)");
    }
  }
  const config::Config run_cfg = config::load(config_path.string(), {});
  const worker::StragglerModel stragglers(run_cfg.stragglers);
  std::vector<metrics::StepRecord> steps = metrics::read_steps(steps_path);
  std::erase_if(steps, [](const metrics::StepRecord& r) { return r.shard != 0; });
  std::sort(steps.begin(), steps.end(),
            [](const auto& a, const auto& b) { return a.step < b.step; });

  Fit fit;
  fit.timing = base;
  std::map<std::uint64_t, double> start_of;
  std::map<int, std::vector<Arrival>> by_worker;
  std::vector<double> marks;  // when passes of the shard loop ended or began
  for (const auto& r : steps) {
    start_of[r.version] = r.t_start;
    marks.push_back(r.t_apply);
    double last_accepted = -1e300;
    for (const auto& g : r.grads) {
      by_worker[g.worker].push_back({g.seq, r.t_start + g.arrival_s, g.version, g.compute_s});
      marks.push_back(r.t_start + g.arrival_s);
      if (g.accepted) last_accepted = std::max(last_accepted, g.arrival_s);
    }
    // A gradient taken in the same pass of the shard loop as the previous
    // update is stamped before that update ended (arrival_s < 0): its
    // update began when the previous one ended, at t_start.
    if (r.used > 0) {
      fit.timing.apply.push_back(
          std::max(0.0, r.t_apply - r.t_start - std::max(0.0, last_accepted)));
    }
  }
  if (by_worker.empty()) {
    throw DataError(steps_path.string() + ": no gradient records to fit the simulation to");
  }
  fit.workers = by_worker.rbegin()->first + 1;
  const int shards = std::max<int>(1, static_cast<int>(run_cfg.cluster.ps));
  const std::size_t slice = layout::shard_slices(param_count, shards)[0].count;
  const Network net(network, 1);
  fit.floor_s = 2.0 * network.latency_s + 2.0 * net.wire_s(message_bytes(slice));
  std::sort(marks.begin(), marks.end());
  Rounds rounds;
  for (auto& [w, arrivals] : by_worker) {
    std::sort(arrivals.begin(), arrivals.end(),
              [](const Arrival& a, const Arrival& b) { return a.seq < b.seq; });
    add_pairs(w, arrivals, start_of, stragglers, fit.floor_s, marks, poll_max_s, rounds,
              fit.timing.recorded);
  }
  fit.timing.recorded.finish();
  if (fit.timing.recorded.empty()) {
    throw DataError(steps_path.string() +
                    ": no worker has two consecutive gradients on record; a longer run is "
                    "needed to fit the simulation");
  }
  std::vector<double> compute, overhead;
  for (const auto& pairs : fit.timing.recorded.per_worker) {
    for (const Sample& p : pairs) {
      compute.push_back(p.compute_s);
      overhead.push_back(p.overhead_s);
    }
  }
  fit.samples = compute.size();
  fit.apply_samples = fit.timing.apply.size();
  fit.compute_p50_s = metrics::percentile(compute, 50);
  fit.overhead_p50_s = metrics::percentile(overhead, 50);
  fit.apply_p50_s = metrics::percentile(fit.timing.apply, 50);
  return fit;
}

nlohmann::json Fit::to_json(const std::filesystem::path& run_dir) const {
  return {{"from", run_dir.string()},
          {"workers_recorded", workers},
          {"samples", samples},
          {"apply_samples", apply_samples},
          {"compute_p50_s", compute_p50_s},
          {"overhead_p50_s", overhead_p50_s},
          {"apply_p50_s", apply_p50_s},
          {"network_floor_s", floor_s}};
}

}  // namespace syncopt::sim
