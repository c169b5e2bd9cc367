// Compute, overhead and apply times of the simulation (see timing.hpp).
#include "sim/timing.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "common/error.hpp"
#include "worker/compute_model.hpp"
#include "worker/straggler.hpp"

namespace syncopt::sim {

namespace {

constexpr double kPi = 3.14159265358979323846;
// Streams of worker::hash_uniform, apart from the straggler model's 0..4.
constexpr std::uint64_t kStreamCompute = 16;  // 16.. : compute-time draws
constexpr std::uint64_t kStreamPick = 64;     // picking an empirical sample
constexpr std::uint64_t kStreamApply = 66;
constexpr std::uint64_t kStreamRound = 67;  // choosing the recorded round to replay
constexpr std::uint64_t kProbes = 8;        // recorded steps tried before any pair will do
constexpr std::uint64_t kShardSalt = 0x5348415244ULL;  // apply draws: shard ids apart from workers

double uniform(std::uint64_t seed, std::uint64_t a, std::uint64_t b, std::uint64_t stream) {
  return worker::hash_uniform(seed, a, b, stream);
}

}  // namespace

double draw(config::ComputeDist dist, double mean, double cv, std::uint64_t seed, std::uint64_t a,
            std::uint64_t b) {
  return worker::draw_time(dist, mean, cv, seed, a, b);
}

void Recorded::add(int worker, std::uint64_t round, const Sample& s) {
  const auto w = static_cast<std::size_t>(worker);
  if (per_worker.size() <= w) {
    per_worker.resize(w + 1);
    at_round.resize(w + 1);
  }
  at_round[w][round] = static_cast<std::uint32_t>(per_worker[w].size());
  per_worker[w].push_back(s);
}

void Recorded::finish() {
  // Recorded workers without a pair are left out (the others renumbered).
  for (std::size_t w = per_worker.size(); w-- > 0;) {
    if (!per_worker[w].empty()) continue;
    per_worker.erase(per_worker.begin() + static_cast<std::ptrdiff_t>(w));
    at_round.erase(at_round.begin() + static_cast<std::ptrdiff_t>(w));
  }
  std::map<std::uint64_t, std::size_t> readers;
  for (const auto& m : at_round) {
    for (const auto& kv : m) ++readers[kv.first];
  }
  rounds.clear();
  by_group.assign(per_worker.size() + 1, {});
  for (const auto& [id, n] : readers) {
    rounds.push_back(id);
    by_group[n].push_back(id);
  }
}

namespace {

std::size_t index_of(double u, std::size_t n) {
  return std::min(static_cast<std::size_t>(u * static_cast<double>(n)), n - 1);
}

}  // namespace

const Sample& Recorded::draw(int worker, std::uint64_t round, int group, int workers,
                             std::uint64_t seq, std::uint64_t seed) const {
  const auto k = static_cast<std::uint64_t>(per_worker.size());
  const auto w = static_cast<std::uint64_t>(worker);
  const auto r = static_cast<std::size_t>(w % k);
  const auto g = static_cast<std::size_t>(std::clamp<long>(
      std::lround(static_cast<double>(group) * static_cast<double>(k) / std::max(1, workers)), 1,
      static_cast<long>(k)));
  // Every worker of a cohort probes the same rounds in the same order: first
  // among the rounds of as many workers, then among all.
  for (const auto* list : {&by_group[g], &rounds}) {
    if (list->empty()) continue;
    for (std::uint64_t probe = 0; probe < kProbes; ++probe) {
      const double u = uniform(seed, (w / k) * kProbes + probe, round, kStreamRound);
      const std::uint64_t id = (*list)[index_of(u, list->size())];
      if (const auto it = at_round[r].find(id); it != at_round[r].end()) {
        return per_worker[r][it->second];
      }
    }
  }
  return per_worker[r][index_of(uniform(seed, w, seq, kStreamPick), per_worker[r].size())];
}

double TimingModel::compute_s(const Draw& d) const {
  if (!recorded.empty()) {
    return recorded.draw(d.worker, d.round, d.group, d.workers, d.seq, seed).compute_s;
  }
  return draw(compute_dist, compute_mean_s, compute_cv, seed, static_cast<std::uint64_t>(d.worker),
              d.seq);
}

double TimingModel::overhead_s_of(const Draw& d) const {
  if (!recorded.empty()) {
    return recorded.draw(d.worker, d.round, d.group, d.workers, d.seq, seed).overhead_s;
  }
  return overhead_s;
}

double TimingModel::apply_s_of(int shard, std::uint64_t version) const {
  if (apply.empty()) return apply_s;
  const double u =
      uniform(seed, kShardSalt + static_cast<std::uint64_t>(shard), version, kStreamApply);
  const auto i = static_cast<std::size_t>(u * static_cast<double>(apply.size()));
  return apply[std::min(i, apply.size() - 1)];
}

TimingModel timing_from_config(const config::Config& cfg) {
  TimingModel t;
  t.seed = cfg.sim.seed;
  t.compute_mean_s = cfg.sim.compute_ms / 1000.0;
  t.compute_cv = cfg.sim.compute_cv;
  t.compute_dist = cfg.sim.compute_dist;
  t.overhead_s = cfg.sim.overhead_ms / 1000.0;
  t.apply_s = cfg.sim.apply_ms / 1000.0;
  return t;
}

}  // namespace syncopt::sim
