// Simulated staleness: the draw of s_t and the parameter history (see
// staleness.hpp).
#include "replica/staleness.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "common/error.hpp"
#include "common/seed.hpp"

namespace syncopt::replica {

namespace {

// Keeps the staleness draws apart from any other use of the same seed.
constexpr std::uint64_t kStream = 0x57a1e'5eedULL;

// Uniform in [0, 1), 53 bits, from (seed, t).
double uniform01(std::uint64_t seed, std::uint64_t t) {
  return unit_interval(splitmix64(splitmix64(seed ^ kStream) ^ t));
}

bool is_integer(double x) { return std::floor(x) == x; }

std::string number(double x) {
  std::string s = std::to_string(x);
  s.erase(s.find_last_not_of('0') + 1);
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

}  // namespace

double clamped_geometric_mean(double q, std::int64_t max) {
  // sum_{k=1..max} q^k = q (1 - q^max) / (1 - q); at q = 1 every draw is clamped.
  if (q >= 1.0) return static_cast<double>(max);
  return q * (1.0 - std::pow(q, static_cast<double>(max))) / (1.0 - q);
}

StalenessModel::StalenessModel(const StalenessOptions& opt) : m_opt(opt) {
  const double s = opt.mean;
  if (!(s > 0.0) || !std::isfinite(s)) {
    throw ConfigError("train.simulated_staleness = " + number(s) +
                      ": a staleness model needs a finite mean > 0");
  }
  switch (opt.dist) {
    case StalenessDist::kFixed:
      if (!is_integer(s)) {
        throw ConfigError("train.simulated_staleness = " + number(s) +
                          ": a fixed staleness is a whole number of updates (or use "
                          "train.staleness_dist = \"uniform\" or \"geometric\")");
      }
      m_max = static_cast<std::int64_t>(s);
      break;
    case StalenessDist::kUniform:
      if (!is_integer(2.0 * s)) {
        throw ConfigError("train.simulated_staleness = " + number(s) +
                          ": uniform staleness is drawn from 0 .. 2s, so 2s must be a whole "
                          "number");
      }
      m_max = static_cast<std::int64_t>(2.0 * s);
      break;
    case StalenessDist::kGeometric: {
      m_max = opt.max > 0 ? opt.max : static_cast<std::int64_t>(std::ceil(4.0 * s));
      if (!(static_cast<double>(m_max) > s)) {
        throw ConfigError("train.staleness_max = " + std::to_string(m_max) +
                          ": must be above train.simulated_staleness = " + number(s) +
                          " (the clamped draws could not have that mean)");
      }
      // Bisection for q with E[min(G, max)] = s; the mean rises with q from 0 to max.
      double lo = 0.0, hi = 1.0;
      for (int i = 0; i < 200 && hi - lo > 1e-15; ++i) {
        const double mid = 0.5 * (lo + hi);
        (clamped_geometric_mean(mid, m_max) < s ? lo : hi) = mid;
      }
      m_q = 0.5 * (lo + hi);
      break;
    }
  }
}

std::int64_t StalenessModel::draw(std::uint64_t t) const {
  switch (m_opt.dist) {
    case StalenessDist::kFixed:
      return m_max;
    case StalenessDist::kUniform: {
      const double u = uniform01(m_opt.seed, t);
      return std::min<std::int64_t>(m_max, static_cast<std::int64_t>(u * (m_max + 1)));
    }
    case StalenessDist::kGeometric: {
      // Inversion: P(G >= k) = q^k, so G = floor(ln(1-u) / ln q).
      const double u = uniform01(m_opt.seed, t);
      const double g = std::floor(std::log1p(-u) / std::log(m_q));
      return g >= static_cast<double>(m_max) ? m_max : static_cast<std::int64_t>(g);
    }
  }
  return 0;
}

std::int64_t StalenessModel::at(std::uint64_t t) const {
  const std::int64_t s = draw(t);
  return t < static_cast<std::uint64_t>(s) ? static_cast<std::int64_t>(t) : s;
}

// ------------------------------------------------------------------ history

ParamHistory::ParamHistory(std::size_t depth, std::size_t count)
    : m_depth(depth), m_count(count), m_buffer(depth * count) {
  if (depth == 0) throw InternalError("ParamHistory: depth 0");
}

float* ParamHistory::push(std::uint64_t version) {
  if (m_held > 0 && version != m_newest + 1) {
    throw InternalError("ParamHistory::push: version " + std::to_string(version) +
                        " after version " + std::to_string(m_newest));
  }
  m_newest = version;
  m_held = std::min(m_held + 1, m_depth);
  return m_buffer.data() + slot(version) * m_count;
}

const float* ParamHistory::at(std::uint64_t version) const {
  if (m_held == 0 || version > m_newest || version < oldest()) {
    throw InternalError("ParamHistory::at: version " + std::to_string(version) + " is not held (" +
                        (m_held == 0
                             ? std::string("empty")
                             : std::to_string(oldest()) + " .. " + std::to_string(m_newest)) +
                        ")");
  }
  return m_buffer.data() + slot(version) * m_count;
}

checkpoint::State ParamHistory::state() const {
  checkpoint::State s;
  s.put("depth", static_cast<std::uint64_t>(m_depth));
  s.put("count", static_cast<std::uint64_t>(m_count));
  s.put("newest", m_newest);
  s.put("held", static_cast<std::uint64_t>(m_held));
  std::vector<float> params;
  params.reserve(m_held * m_count);
  for (std::size_t i = 0; i < m_held; ++i) {
    const float* p = at(oldest() + i);
    params.insert(params.end(), p, p + m_count);
  }
  s.put("params", std::move(params));
  return s;
}

void ParamHistory::restore(const checkpoint::State& s) {
  const auto depth = s.get<std::uint64_t>("depth");
  const auto count = s.get<std::uint64_t>("count");
  if (depth != m_depth || count != m_count) {
    throw ConfigError(s.field_error(
        "depth", "a history of " + std::to_string(depth) + " versions of " + std::to_string(count) +
                     " parameters; this run keeps " + std::to_string(m_depth) + " of " +
                     std::to_string(m_count) +
                     ": resume with the train.simulated_staleness, train.staleness_dist and "
                     "train.staleness_max the run was started with"));
  }
  const auto newest = s.get<std::uint64_t>("newest");
  const auto held = s.get<std::uint64_t>("held");
  const auto& params = s.get<std::vector<float>>("params");
  if (held == 0 || held > m_depth || held > newest + 1 || params.size() != held * m_count) {
    throw DataError(s.field_error("params", std::to_string(params.size()) + " floats for " +
                                                std::to_string(held) + " versions up to " +
                                                std::to_string(newest)));
  }
  m_held = 0;
  for (std::uint64_t i = 0; i < held; ++i) {
    float* dst = push(newest + 1 - held + i);
    std::copy(params.begin() + static_cast<std::ptrdiff_t>(i * m_count),
              params.begin() + static_cast<std::ptrdiff_t>((i + 1) * m_count), dst);
  }
}

}  // namespace syncopt::replica
