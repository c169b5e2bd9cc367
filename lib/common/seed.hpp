// Seed mixing, one copy for the whole program: splitmix64 (Steele, Lea and
// Flood 2014) and what is built on it. Every seeded stream of syncopt
// (data order, synthetic data, straggler and compute-time draws, simulated
// staleness) derives its numbers here, so a run is the same on every
// machine and standard library.
#pragma once

#include <cstdint>

namespace syncopt {

constexpr std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A seed for the pair (a, b): different pairs give unrelated seeds.
constexpr std::uint64_t mix_seed(std::uint64_t a, std::uint64_t b) {
  return splitmix64(splitmix64(a) ^ (b + 0x632be59bd9b4e019ULL));
}

// Uniform in [0, 1) from the top 53 bits of a hash.
constexpr double unit_interval(std::uint64_t h) { return static_cast<double>(h >> 11) * 0x1.0p-53; }

}  // namespace syncopt
