// The one-core GEMM peak and the CPU model (see cpu_peak.hpp).
#include "nn/cpu_peak.hpp"

#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <vector>

#include "common/error.hpp"

namespace syncopt::nn {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const auto first = line.find_first_not_of(" \t", colon + 1);
    return first == std::string::npos ? "unknown" : line.substr(first);
  }
  return "unknown";
}

CpuPeak measure_one_core_peak(double budget_s) {
  using Clock = std::chrono::steady_clock;
  constexpr dnnl_dim_t kN = 256;
  constexpr double kFlop = 2.0 * kN * kN * kN;
  const auto n = static_cast<std::size_t>(kN);
  std::vector<float> a(n * n), b(n * n), c(n * n, 0.0f);
  for (std::size_t i = 0; i < a.size(); ++i) {
    a[i] = static_cast<float>(i % 7) * 0.125f - 0.375f;
    b[i] = static_cast<float>(i % 5) * 0.25f - 0.5f;
  }
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto gemm = [&] {
    const auto t0 = Clock::now();
    const dnnl_status_t st =
        dnnl_sgemm('N', 'N', kN, kN, kN, 1.0f, a.data(), kN, b.data(), kN, 0.0f, c.data(), kN);
    if (st != dnnl_success) {
      omp_set_num_threads(threads);
      throw InternalError("dnnl_sgemm failed (status " + std::to_string(static_cast<int>(st)) +
                          ") measuring the one-core peak");
    }
    return std::chrono::duration<double>(Clock::now() - t0).count();
  };
  const auto start = Clock::now();
  gemm();  // warm-up: oneDNN's start and kernel generation, caches
  const auto warm = Clock::now();
  double best = 1e30;
  int timed = 0;
  while (timed < 10 || std::chrono::duration<double>(Clock::now() - warm).count() < budget_s) {
    best = std::min(best, gemm());
    ++timed;
  }
  omp_set_num_threads(threads);
  CpuPeak p;
  p.cpu = cpu_model();
  p.gflops = kFlop / best / 1e9;
  p.method = "dnnl_sgemm fp32 256x256x256, one thread, fastest of " + std::to_string(timed);
  p.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return p;
}

}  // namespace syncopt::nn
