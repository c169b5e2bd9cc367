// The one factory that knows every compute backend this build has: the CPU
// (always) and CUDA (when built with it). Everything else receives a
// train::Compute and never asks which.
#pragma once

#include <string>

#include "config/enums.hpp"
#include "train/compute.hpp"

namespace syncopt::app {

// compute.backend; `threads` = compute.threads; `dead_after_s` =
// cluster.dead_after_s, the deadline of every wait for the GPU and for NCCL
// (a peer that never joins an allreduce is an error after it, not a hang).
// Asking for cuda in a build without it is a ConfigError saying what to
// do; a missing GPU is reported when a backend is made. `threads` above the
// CPUs this process may use is capped to them (capped_threads).
train::Compute make_compute(const config::ComputeConfig& compute, double dead_after_s = 60.0);

// `threads`, or the CPUs this process may use (its affinity) when fewer,
// saying so on stderr.
int capped_threads(int threads);

// Whether this build has the CUDA backend.
bool built_with_cuda();

}  // namespace syncopt::app
