// Skipping a Catch2 test case that this machine cannot run, so that CTest
// reports it as skipped, never as passed: Catch2 2.13 (Debian's) has no
// SKIP(), so the case prints kSkipMarker and returns, and the CTest entries
// of the Catch2 binaries carry SKIP_REGULAR_EXPRESSION with the same marker
// (tests/CMakeLists.txt). Run by hand, the case prints why it did nothing.
#pragma once

#include <iostream>
#include <string>

namespace syncopt_test {

inline constexpr const char* kSkipMarker = "SYNCOPT-TEST-SKIPPED:";

// Prints the marker and the reason; returns true, for `if (skip(...)) return;`.
inline bool skip_test(const std::string& reason) {
  std::cout << kSkipMarker << " " << reason << std::endl;
  return true;
}

// The CPU backend's bf16 (compute.precision = "bf16") needs AVX-512
// (nn::cpu_runs_bf16); on an AVX2-only CPU a bf16 test has nothing to run.
inline bool skip_without_cpu_bf16(bool cpu_runs_bf16) {
  if (cpu_runs_bf16) return false;
  return skip_test(
      "this CPU has no AVX-512, so oneDNN cannot run compute.precision = bf16 "
      "(the refusal itself is tested in 'make_compute: cpu, cuda without CUDA')");
}

}  // namespace syncopt_test
