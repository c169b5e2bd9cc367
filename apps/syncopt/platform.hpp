// The one factory that knows every compute backend this build has: the CPU
// (always) and CUDA (when built with it). Everything else receives a
// train::Compute and never asks which.
#pragma once

#include <string>

#include "train/compute.hpp"

namespace syncopt::app {

// compute.backend = "cpu" | "cuda"; `threads` = compute.threads. Asking for
// "cuda" in a build without it, or an unknown name, is a ConfigError saying
// what to do; a missing GPU is reported when a backend is made.
train::Compute make_compute(const std::string& backend, int threads);

// Whether this build has the CUDA backend.
bool built_with_cuda();

}  // namespace syncopt::app
