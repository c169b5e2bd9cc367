// Seeded compute-time draws (see compute_model.hpp).
#include "worker/compute_model.hpp"

#include <algorithm>
#include <cmath>

#include "common/error.hpp"
#include "worker/straggler.hpp"

namespace syncopt::worker {

namespace {

constexpr double kPi = 3.14159265358979323846;
// Streams of hash_uniform, apart from the straggler model's 0..4.
constexpr std::uint64_t kStreamCompute = 16;  // 16.. : compute-time draws

double uniform(std::uint64_t seed, std::uint64_t a, std::uint64_t b, std::uint64_t stream) {
  return hash_uniform(seed, a, b, stream);
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

double draw_time(config::ComputeDist dist, double mean, double cv, std::uint64_t seed,
                 std::uint64_t a, std::uint64_t b) {
  if (cv <= 0.0) return mean;
  switch (dist) {
    case config::ComputeDist::kLognormal: {
      // sigma^2 = ln(1 + cv^2), mu = ln(mean) - sigma^2 / 2: E = mean, sd = cv * mean.
      const double s2 = std::log1p(cv * cv);
      return std::exp(std::log(mean) - 0.5 * s2 +
                      std::sqrt(s2) * normal(seed, a, b, kStreamCompute));
    }
    case config::ComputeDist::kGamma:
      // shape 1/cv^2, scale mean * cv^2: E = mean, sd = cv * mean.
      return mean * cv * cv * gamma_unit(1.0 / (cv * cv), seed, a, b);
  }
  return mean;
}

double modelled_compute_s(const config::SimConfig& sim, int worker, std::uint64_t seq) {
  return draw_time(sim.compute_dist, sim.compute_ms / 1000.0, sim.compute_cv, sim.seed,
                   static_cast<std::uint64_t>(worker), seq);
}

}  // namespace syncopt::worker
