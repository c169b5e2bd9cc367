// The machine's measured one-core compute peak (docs/design.md §7, "How
// far from the limit"): what one core does at best on the kind of work a
// model's layers are made of, an FP32 GEMM by oneDNN, timed at the start
// of a run so that `syncopt report` can say how far a worker's compute
// rate is from it, and the CPU model it was measured on.
#pragma once

#include <string>

namespace syncopt::nn {

struct CpuPeak {
  std::string cpu;       // /proc/cpuinfo's "model name" ("unknown" when absent)
  double gflops = 0.0;   // the best rate of the timed GEMMs, 1e9 FLOP/s
  std::string method;    // how it was measured, for summary.json
  double seconds = 0.0;  // what the measurement cost
};

// Times dnnl_sgemm on 256x256x256 FP32 matrices (2 * 256^3 FLOP each) with
// one OpenMP thread (the caller's thread count is restored), once to warm
// up, then again until `budget_s` has passed since (at least 10 times);
// the peak is the fastest, which a busy machine's interruptions cannot
// make faster (but a machine busy all along makes slower).
CpuPeak measure_one_core_peak(double budget_s = 0.05);

// The CPU model of this host, from /proc/cpuinfo; "unknown" if none.
std::string cpu_model();

}  // namespace syncopt::nn
