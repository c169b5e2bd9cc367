// Compute, overhead and apply times of the simulation (see timing.hpp).
#include "sim/timing.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "common/error.hpp"
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

// Standard normal by Box-Muller from two uniforms of stream pair (s, s+1).
double normal(std::uint64_t seed, std::uint64_t a, std::uint64_t b, std::uint64_t s) {
  const double u1 = std::max(uniform(seed, a, b, s), 1e-300);
  const double u2 = uniform(seed, a, b, s + 1);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * kPi * u2);
}

// Gamma(shape k, scale 1) by Marsaglia and Tsang (2000); shape < 1 through
// Gamma(k + 1) * U^(1/k). Each attempt uses its own three streams.
double gamma_unit(double k, std::uint64_t seed, std::uint64_t a, std::uint64_t b) {
  double boost = 1.0;
  if (k < 1.0) {
    boost = std::pow(std::max(uniform(seed, a, b, kStreamCompute), 1e-300), 1.0 / k);
    k += 1.0;
  }
  const double d = k - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (std::uint64_t attempt = 0; attempt < 1000; ++attempt) {
    const std::uint64_t s = kStreamCompute + 1 + 3 * attempt;
    const double x = normal(seed, a, b, s);
    const double v = std::pow(1.0 + c * x, 3);
    if (v <= 0.0) continue;
    const double u = uniform(seed, a, b, s + 2);
    if (std::log(std::max(u, 1e-300)) < 0.5 * x * x + d - d * v + d * std::log(v)) {
      return boost * d * v;
    }
  }
  return boost * d;  // acceptance is ~96% per attempt: never reached in practice
}

}  // namespace

double draw(const std::string& dist, double mean, double cv, std::uint64_t seed, std::uint64_t a,
            std::uint64_t b) {
  if (cv <= 0.0) return mean;
  if (dist == "lognormal") {
    // sigma^2 = ln(1 + cv^2), mu = ln(mean) - sigma^2 / 2: E = mean, sd = cv * mean.
    const double s2 = std::log1p(cv * cv);
    return std::exp(std::log(mean) - 0.5 * s2 + std::sqrt(s2) * normal(seed, a, b, kStreamCompute));
  }
  if (dist == "gamma") {
    // shape 1/cv^2, scale mean * cv^2: E = mean, sd = cv * mean.
    return mean * cv * cv * gamma_unit(1.0 / (cv * cv), seed, a, b);
  }
  throw ConfigError("sim.compute_dist = \"" + dist + "\": must be lognormal or gamma");
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
