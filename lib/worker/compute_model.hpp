// Seeded draws of compute times (docs/design.md, "Clocks"): what a gradient
// costs in modelled time, for the virtual clock of real runs (a worker's
// gradient gets a simulated finish time: this compute time plus its seeded
// straggler delay) and for the simulator (sim/). A pure function of (seed,
// worker, step), the same on every machine: a virtual-clock run decides the
// same N of N + b at every step, however the machine is loaded.
#pragma once

#include <cstdint>
#include <string>

#include "config/config.hpp"

namespace syncopt::worker {

// A lognormal or gamma draw with mean `mean` and coefficient of variation
// `cv` from the hash stream (seed, a, b): exactly `mean` when cv = 0.
double draw_time(config::ComputeDist dist, double mean, double cv, std::uint64_t seed,
                 std::uint64_t a, std::uint64_t b);

// The modelled compute time (seconds) of worker `worker`'s gradient number
// `seq` under the [sim] keys (sim.compute_ms, sim.compute_cv,
// sim.compute_dist, sim.seed).
double modelled_compute_s(const config::SimConfig& sim, int worker, std::uint64_t seq);

}  // namespace syncopt::worker
