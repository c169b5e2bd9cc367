// Where simulated time goes, apart from the network (network.hpp) and the
// injected stragglers (worker/straggler.hpp): a worker's compute time and its
// overhead per gradient, and a shard's time per update. Either given by the
// [sim] keys (a lognormal or gamma compute time with mean sim.compute_ms and
// coefficient of variation sim.compute_cv; fixed overhead and apply times) or
// fitted from a real run's records (fit.hpp): its workers' measured compute
// times and overheads, replayed step by step (Recorded below), and the
// shard's apply times.
//
// Every draw is a pure function of (seed, worker or shard, index), through
// worker::hash_uniform, so a simulation is the same whatever order its
// events are processed in, and the same on every machine.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "config/config.hpp"

namespace syncopt::sim {

// A real run's gradients as (compute, overhead) pairs, per recorded worker,
// also indexed by their round: the moment the shard answered the pull each
// was computed after, and the version it sent. The workers of one round were
// answered in one pass of the shard loop: a group. A draw for simulated
// worker w, answered in a group of g workers (of K) with version v, replays
// the pair of recorded worker r = w mod K_rec from a recorded round: the
// first, in a sequence hashed from (v, w / K_rec), that r took part in and
// that had g' = clamp(round(g K_rec / K), 1, K_rec) workers; failing that,
// the first that r took part in; failing that, any pair of r's. So the
// workers of a simulated group replay one recorded group of the same size:
// what its workers shared (a slow reply, a busy node, a straggler computing
// next to them, running in a convoy since they were answered together)
// stays shared, while cohorts of K_rec and versions are independent.
struct Sample {
  double compute_s = 0.0;
  double overhead_s = 0.0;
};

struct Recorded {
  std::vector<std::vector<Sample>> per_worker;
  std::vector<std::unordered_map<std::uint64_t, std::uint32_t>> at_round;  // into per_worker
  std::vector<std::uint64_t> rounds;                 // recorded rounds (ids), each with a pair
  std::vector<std::vector<std::uint64_t>> by_group;  // [g]: the rounds with g pairs
  bool empty() const { return per_worker.empty(); }
  // Appends the pair of recorded worker `worker`'s gradient of round
  // `round` (any id that names it); finish() once every pair is in, before
  // the first draw.
  void add(int worker, std::uint64_t round, const Sample& s);
  void finish();
  // `group` of `workers` simulated workers read version `round`.
  const Sample& draw(int worker, std::uint64_t round, int group, int workers, std::uint64_t seq,
                     std::uint64_t seed) const;
};

struct TimingModel {
  std::uint64_t seed = 1;
  // Given model (used when the fitted samples are empty).
  double compute_mean_s = 0.01;
  double compute_cv = 0.0;
  config::ComputeDist compute_dist = config::ComputeDist::kLognormal;
  double overhead_s = 0.0;
  double apply_s = 0.0;
  // Fitted model (fit.hpp); each one, when present, replaces its given part.
  Recorded recorded;          // compute and overhead
  std::vector<double> apply;  // apply times, drawn independently

  // What worker `worker` spends on its gradient number `seq` (0-based),
  // computed on version `round` of shard 0, which it read in a group of
  // `group` of the `workers` workers (see Recorded).
  struct Draw {
    int worker = 0;
    std::uint64_t seq = 0, round = 0;
    int group = 1, workers = 1;
  };
  double compute_s(const Draw& d) const;      // seconds of compute
  double overhead_s_of(const Draw& d) const;  // seconds of overhead around it
  // Seconds shard `shard` takes to apply its update to `version`.
  double apply_s_of(int shard, std::uint64_t version) const;
};

// The given model from the [sim] keys.
TimingModel timing_from_config(const config::Config& cfg);

// A lognormal or gamma draw with mean `mean` and coefficient of variation
// `cv` from the hash stream (seed, a, b): exactly `mean` when cv = 0.
double draw(config::ComputeDist dist, double mean, double cv, std::uint64_t seed, std::uint64_t a,
            std::uint64_t b);

}  // namespace syncopt::sim
