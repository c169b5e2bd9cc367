// Simulated staleness (the paper's §2.1 study, train.simulated_staleness):
// in local mode the gradient of the update that turns version t into t+1 is
// computed on θ_{t-s_t}, the parameters s_t updates old, and applied to θ_t
// by the optimiser, as an asynchronous parameter server would apply it.
//
// Two pieces, both free of I/O:
// - StalenessModel: the draw of s_t, a pure function of (seed, t), so a run
//   is reproducible and a resumed run draws what the straight run drew, with
//   no RNG state to checkpoint;
// - ParamHistory: a ring of the last `depth` parameter vectors by version,
//   which a replica's compute_gradient_at() reads from.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "checkpoint/state.hpp"

namespace syncopt::replica {

enum class StalenessDist {
  kFixed,      // s_t = s (s an integer)
  kUniform,    // s_t uniform on the integers 0 .. 2s (2s an integer)
  kGeometric,  // P(s_t >= k) = q^k, clamped at `max`; q chosen so that E[s_t] = s
};

struct StalenessOptions {
  double mean = 0.0;  // s, in updates; > 0 (0 means the feature is off: no model)
  StalenessDist dist = StalenessDist::kFixed;
  // Geometric only: the largest s_t (draws above it are clamped to it);
  // 0 = ceil(4 s). Fixed and uniform have their own largest, s and 2s.
  std::int64_t max = 0;
  std::uint64_t seed = 0;
};

class StalenessModel {
 public:
  // ConfigError for options no draw can honour (a non-integer fixed s, a
  // geometric max not above s, ...); config validation rejects them first.
  explicit StalenessModel(const StalenessOptions& opt);

  // The largest s_t any draw returns: the history keeps max() + 1 versions.
  std::int64_t max() const { return m_max; }
  // The staleness of the update that turns version t into t+1, before the
  // warm-up: a pure function of (seed, t), in [0, max()].
  std::int64_t draw(std::uint64_t t) const;
  // What is applied: min(draw(t), t), since θ_{t-s} exists only for s <= t.
  // (The first max() updates therefore have a lower mean staleness.)
  std::int64_t at(std::uint64_t t) const;
  // Geometric: q of P(s_t >= k) = q^k (0 for the other distributions).
  double geometric_q() const { return m_q; }

 private:
  StalenessOptions m_opt;
  std::int64_t m_max = 0;
  double m_q = 0.0;
};

// E[min(G, max)] for P(G >= k) = q^k: sum_{k=1..max} q^k (the geometric's
// mean after clamping). Exposed for the tests.
double clamped_geometric_mean(double q, std::int64_t max);

// The last `depth` parameter vectors θ_v [count floats each], by version v:
// θ_v lives in slot v mod depth of one buffer of depth * count floats
// (depth * count * 4 bytes: 51 x 3.3 MB = 168 MB for the CNN at a fixed
// s = 50).
class ParamHistory {
 public:
  ParamHistory(std::size_t depth, std::size_t count);

  // The slot to fill with θ_v [count]; v is newest() + 1, or any version on
  // an empty history. Evicts θ_{v-depth}. InternalError on a gap.
  float* push(std::uint64_t version);
  // θ_v [count]; InternalError unless oldest() <= v <= newest().
  const float* at(std::uint64_t version) const;

  bool empty() const { return m_held == 0; }
  std::uint64_t newest() const { return m_newest; }
  std::uint64_t oldest() const { return m_newest + 1 - m_held; }
  std::size_t depth() const { return m_depth; }
  std::size_t count() const { return m_count; }
  std::size_t nbytes() const { return m_buffer.size() * sizeof(float); }

  // "depth", "count", "newest", "held" (u64) and "params", the held
  // versions oldest first (float array [held * count]). restore() needs the
  // same depth and count (ConfigError: the staleness settings changed;
  // DataError: a malformed state).
  checkpoint::State state() const;
  void restore(const checkpoint::State& s);

 private:
  std::size_t slot(std::uint64_t version) const { return version % m_depth; }

  std::size_t m_depth, m_count;
  std::vector<float> m_buffer;  // [depth, count]
  std::uint64_t m_newest = 0;
  std::size_t m_held = 0;
};

}  // namespace syncopt::replica
