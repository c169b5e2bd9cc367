// Straggler delay models (see straggler.hpp).
#include "worker/straggler.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.hpp"
#include "common/seed.hpp"

namespace syncopt::worker {

namespace {

constexpr double kPi = 3.14159265358979323846;

}  // namespace

double hash_uniform(std::uint64_t seed, std::uint64_t worker, std::uint64_t step,
                    std::uint64_t stream) {
  std::uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ worker);
  h = splitmix64(h ^ step);
  h = splitmix64(h ^ stream);
  return unit_interval(h);
}

StragglerModel::StragglerModel(const config::StragglerConfig& cfg) : m_cfg(cfg) {
  if (cfg.model != config::StragglerModel::kTrace) return;
  const std::string& path = cfg.trace;
  if (!std::filesystem::exists(path)) {
    throw MissingInputError("stragglers.trace = \"" + path +
                            "\": file not found (give a steps.jsonl of an earlier run or a CSV "
                            "of worker,arrival_s lines)");
  }
  std::ifstream in(path);
  std::string line;
  std::int64_t lineno = 0;
  // steps.jsonl: a late gradient is recorded in a later step than the one
  // it was computed for; its delay is the time since its own version began.
  struct Arrival {
    int worker;
    std::uint64_t version;
    double at;  // run time
  };
  std::vector<Arrival> arrivals;
  std::map<std::uint64_t, double> starts;  // version -> run time it began
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty() || line[0] == '#') continue;
    if (line[0] == '{') {
      nlohmann::json rec;
      try {
        rec = nlohmann::json::parse(line);
        // One shard's records suffice: the arrivals of every worker.
        if (rec.value("shard", 0) != 0) continue;
        const double t_start = rec.at("t_start").get<double>();
        starts[rec.at("version").get<std::uint64_t>()] = t_start;
        for (const auto& g : rec.at("grads")) {
          arrivals.push_back({g.at("worker").get<int>(), g.at("version").get<std::uint64_t>(),
                              t_start + g.at("arrival_s").get<double>()});
        }
      } catch (const std::exception& e) {
        throw DataError(path + ":" + std::to_string(lineno) +
                        ": not a steps.jsonl record with grads[].worker and arrival_s (" +
                        e.what() + ")");
      }
    } else {
      std::istringstream ss(line);
      int w = 0;
      char comma = 0;
      double t = 0.0;
      if (!(ss >> w >> comma >> t) || comma != ',' || t < 0.0 || w < 0) {
        if (lineno == 1) continue;  // a CSV header line
        throw DataError(path + ":" + std::to_string(lineno) +
                        ": expected 'worker,arrival_s' with arrival_s >= 0, found '" + line + "'");
      }
      m_trace[w].push_back(t);
    }
  }
  for (const Arrival& a : arrivals) {
    const auto it = starts.find(a.version);
    if (it != starts.end()) m_trace[a.worker].push_back(a.at - it->second);
  }
  if (m_trace.empty()) {
    throw DataError("stragglers.trace = \"" + path + "\": no arrival times found in the file");
  }
}

bool StragglerModel::affects(int worker) const {
  if (m_cfg.workers.empty()) return true;
  return std::find(m_cfg.workers.begin(), m_cfg.workers.end(), worker) != m_cfg.workers.end();
}

double StragglerModel::delay_s(int worker, std::uint64_t step, double compute_s) const {
  return slowdown(worker, step).late_s(compute_s, 1.0);
}

Slowdown StragglerModel::slowdown(int worker, std::uint64_t step) const {
  Slowdown s;
  if (!affects(worker)) return s;
  const auto w = static_cast<std::uint64_t>(worker);
  const double mean_s = m_cfg.mean_ms / 1000.0;
  using M = config::StragglerModel;
  switch (m_cfg.model) {
    case M::kNone:
      break;
    case M::kFixed:
      s.factor = m_cfg.factor;
      s.extra_s = mean_s;
      break;
    case M::kBernoulli:
      if (hash_uniform(m_cfg.seed, w, step, 0) < m_cfg.prob) s.factor = m_cfg.factor;
      break;
    case M::kExponential:
      s.extra_s = -mean_s * std::log1p(-hash_uniform(m_cfg.seed, w, step, 1));
      break;
    case M::kLognormal: {
      // Box-Muller normal; mu chosen so that E[delay] = mean: mu = ln(mean) - sigma^2 / 2.
      const double u1 = std::max(hash_uniform(m_cfg.seed, w, step, 2), 1e-300);
      const double u2 = hash_uniform(m_cfg.seed, w, step, 3);
      const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * kPi * u2);
      if (mean_s <= 0.0) break;
      const double mu = std::log(mean_s) - 0.5 * m_cfg.sigma * m_cfg.sigma;
      s.extra_s = std::exp(mu + m_cfg.sigma * z);
      break;
    }
    case M::kPareto: {
      // Scale x_m so that E = alpha x_m / (alpha - 1) = mean.
      const double xm = mean_s * (m_cfg.alpha - 1.0) / m_cfg.alpha;
      const double u = hash_uniform(m_cfg.seed, w, step, 4);
      s.extra_s = xm / std::pow(1.0 - u, 1.0 / m_cfg.alpha);
      break;
    }
    case M::kTrace: {
      const auto it = m_trace.find(worker);
      if (it == m_trace.end() || it->second.empty()) break;
      s.pace_s = it->second[step % it->second.size()];
      break;
    }
  }
  return s;
}

}  // namespace syncopt::worker
