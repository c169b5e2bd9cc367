// How far from the limit (docs/design.md §7, docs/outputs.md "How far from
// the limit"): from the step records, a worker's compute rate in FLOP/s of
// the model's FLOPs against the one-core GEMM peak measured at the start
// of the run (nn/cpu_peak.hpp), each parameter-server shard's gradient ingest
// in GB/s, and in allreduce the algorithm and bus bandwidth as nccl-tests
// define them (busbw = algbw * 2(n-1)/n). Wall-clock runs only: a virtual
// or simulated clock's times are modelled, not measured.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "metrics/analysis.hpp"
#include "metrics/step_record.hpp"

namespace syncopt::metrics {

// Training FLOPs of an example: the forward pass and a backward pass of
// twice its FLOPs (gradients of the inputs and of the weights).
inline constexpr double kTrainFlopsPerForward = 3.0;

class Limits {
 public:
  explicit Limits(const RunInfo& info);
  void add(const StepRecord& r);
  // summary.json's fields: the inputs (model_flops_per_example,
  // param_count, shard_param_counts, machine) and compute_gflops_per_worker,
  // compute_gflops_by_worker, compute_peak_fraction, shard_ingest_gbps,
  // allreduce_bytes, allreduce_reduce_p50_s, allreduce_algbw_gbps,
  // allreduce_busbw_gbps (null where not measured).
  void put_summary(nlohmann::json& summary) const;

 private:
  struct Span {
    double first = 0.0, last = 0.0;
    std::int64_t grads = 0;
    bool any = false;
  };
  const RunInfo& m_info;
  bool m_wall = true;
  std::vector<double> m_flops, m_compute_s;  // per worker, shard 0's gradients
  std::map<int, Span> m_shards;
  std::vector<double> m_reduce_s;  // allreduce: per step, the least reduce of any rank
};

// The lines `syncopt report` prints from a summary's fields above; empty
// when it has none (a simulation, an older summary).
std::string format_limits(const nlohmann::json& summary);

}  // namespace syncopt::metrics
