// How far from the limit (see limits.hpp).
#include "metrics/limits.hpp"

#include <algorithm>
#include <cstdio>

#include "metrics/records.hpp"

namespace syncopt::metrics {

using nlohmann::json;

Limits::Limits(const RunInfo& info) : m_info(info) {
  const auto K = static_cast<std::size_t>(std::max(1, info.workers));
  m_flops.assign(K, 0.0);
  m_compute_s.assign(K, 0.0);
}

void Limits::add(const StepRecord& r) {
  if (!r.clock.empty()) m_wall = false;
  if (!m_wall) return;
  auto& span = m_shards[r.shard];
  span.first = span.any ? std::min(span.first, r.t_start) : r.t_start;
  span.last = span.any ? std::max(span.last, r.t_apply) : r.t_apply;
  span.any = true;
  span.grads += static_cast<std::int64_t>(r.grads.size());
  if (r.shard != 0) return;
  // A gradient's pure compute (compute_s: without a straggler's injected
  // sleeps and without waits for parameters) over the examples it holds.
  const double per_example = kTrainFlopsPerForward * m_info.flops_per_example;
  double least_reduce = -1.0;
  for (const auto& g : r.grads) {
    if (g.worker < 0 || static_cast<std::size_t>(g.worker) >= m_flops.size()) continue;
    const auto w = static_cast<std::size_t>(g.worker);
    const auto examples = g.examples > 0 ? g.examples : m_info.batch;
    m_flops[w] += per_example * static_cast<double>(examples);
    m_compute_s[w] += g.compute_s;
    if (g.phases.has(Phase::kReduce)) {
      const double t = g.phases.get(Phase::kReduce);
      least_reduce = least_reduce < 0.0 ? t : std::min(least_reduce, t);
    }
  }
  // The last rank to reach the allreduce waits for nobody: its reduce is
  // the collective's own time, as nccl-tests time it after a barrier.
  if (least_reduce > 0.0) m_reduce_s.push_back(least_reduce);
}

namespace {

// A field of summary.json's `machine` (read back from a file that may have
// been edited: a wrong type reads as absent, never as a json exception).
double machine_number(const json& m, const char* key, double fallback) {
  if (!m.is_object()) return fallback;
  const auto it = m.find(key);
  return it != m.end() && it->is_number() ? it->get<double>() : fallback;
}
std::string machine_text(const json& m, const char* key, const std::string& fallback) {
  if (!m.is_object()) return fallback;
  const auto it = m.find(key);
  return it != m.end() && it->is_string() ? it->get<std::string>() : fallback;
}

// 4 bytes a value, 2 with exchange.wire = "bf16".
double value_bytes(const RunInfo& info) { return info.wire == "bf16" ? 2.0 : 4.0; }

}  // namespace

void Limits::put_summary(json& s) const {
  const RunInfo& info = m_info;
  s["model_flops_per_example"] = info.flops_per_example > 0 ? json(info.flops_per_example) : json();
  s["param_count"] = info.param_count > 0 ? json(info.param_count) : json();
  s["shard_param_counts"] = info.shard_counts.empty() ? json() : json(info.shard_counts);
  s["machine"] = info.machine;
  double flops = 0.0, seconds = 0.0;
  json by_worker = json::array();
  for (std::size_t w = 0; w < m_flops.size(); ++w) {
    flops += m_flops[w];
    seconds += m_compute_s[w];
    by_worker.push_back(m_compute_s[w] > 0 ? json(m_flops[w] / m_compute_s[w] / 1e9) : json());
  }
  const bool computed = m_wall && info.flops_per_example > 0 && seconds > 0;
  const double rate = computed ? flops / seconds / 1e9 : 0.0;
  s["compute_gflops_per_worker"] = computed ? json(rate) : json();
  s["compute_gflops_by_worker"] = computed ? by_worker : json();
  // Against the cores a worker computes with (compute.threads of them), on
  // the CPU backend only: a GPU's rate is not a CPU's.
  json fraction;
  if (computed && machine_text(info.machine, "backend", "") == "cpu") {
    const double peak = machine_number(info.machine, "one_core_peak_gflops", 0.0);
    const double cores = std::max(1.0, machine_number(info.machine, "threads", 1.0));
    if (peak > 0) fraction = rate / (peak * cores);
  }
  s["compute_peak_fraction"] = fraction;
  // Gradient bytes each shard received (accepted or dropped: every one in
  // its records) over its records' span.
  json ingest;
  const bool every_shard = info.recorded_shards == 0 || info.recorded_shards >= info.shards;
  if (m_wall && info.shards > 0 && every_shard &&
      info.shard_counts.size() == static_cast<std::size_t>(info.shards)) {
    ingest = json::array();
    for (int sh = 0; sh < info.shards; ++sh) {
      const auto it = m_shards.find(sh);
      const double span = it == m_shards.end() ? 0.0 : it->second.last - it->second.first;
      const double bytes = it == m_shards.end()
                               ? 0.0
                               : static_cast<double>(it->second.grads) *
                                     static_cast<double>(info.shard_counts[sh]) * value_bytes(info);
      ingest.push_back(span > 0 ? json(bytes / span / 1e9) : json());
    }
  }
  s["shard_ingest_gbps"] = ingest;
  // nccl-tests: algbw = the buffer's bytes / the time of one allreduce;
  // busbw = algbw * 2(n-1)/n, what each rank's link carries in a ring.
  const bool reduced = info.mode == config::Mode::kAllreduce && !m_reduce_s.empty() &&
                       info.param_count > 0 && info.workers > 1;
  const double bytes = 4.0 * static_cast<double>(info.param_count);
  const double p50 = reduced ? percentile(m_reduce_s, 50) : 0.0;
  const double n = info.workers;
  s["allreduce_bytes"] = reduced ? json(bytes) : json();
  s["allreduce_reduce_p50_s"] = reduced ? json(p50) : json();
  s["allreduce_algbw_gbps"] = reduced && p50 > 0 ? json(bytes / p50 / 1e9) : json();
  s["allreduce_busbw_gbps"] =
      reduced && p50 > 0 ? json(bytes / p50 / 1e9 * 2.0 * (n - 1) / n) : json();
}

namespace {

double number_or(const json& s, const char* key, double fallback) {
  const auto it = s.find(key);
  return it != s.end() && it->is_number() ? it->get<double>() : fallback;
}

std::string fmt(const char* format, double a, double b = 0.0, double c = 0.0) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), format, a, b, c);
  return buf;
}

}  // namespace

std::string format_limits(const json& s) {
  const double rate = number_or(s, "compute_gflops_per_worker", -1.0);
  const auto ingest = s.find("shard_ingest_gbps");
  const double busbw = number_or(s, "allreduce_busbw_gbps", -1.0);
  const bool has_ingest = ingest != s.end() && ingest->is_array();
  if (rate < 0 && !has_ingest && busbw < 0) return "";
  const auto it = s.find("machine");
  const json m = it != s.end() ? *it : json();
  const bool machine = m.is_object();
  std::string out = "how far from the limit";
  if (machine) {
    out += " (" + machine_text(m, "cpu", "unknown CPU") + ", " +
           machine_text(m, "host", "rank 0's host") + ")";
  }
  out += ":\n";
  if (rate >= 0) {
    out += fmt("  compute: %.2f GFLOP/s per worker (3 x %.3f MFLOP forward per example)", rate,
               number_or(s, "model_flops_per_example", 0.0) / 1e6);
    const double fraction = number_or(s, "compute_peak_fraction", -1.0);
    const double peak = machine_number(m, "one_core_peak_gflops", 0.0);
    const double threads = machine_number(m, "threads", 1.0);
    if (fraction >= 0 && threads > 1) {
      out += fmt(" = %.0f %% of %.0f cores at this CPU's measured one-core peak %.1f GFLOP/s",
                 100 * fraction, threads, peak);
    } else if (fraction >= 0) {
      out +=
          fmt(" = %.0f %% of this CPU's measured one-core peak %.1f GFLOP/s", 100 * fraction, peak);
    } else if (machine && machine_text(m, "backend", "") != "cpu") {
      out += " on the " + machine_text(m, "backend", "?") + " backend (no peak for it)";
    }
    out += "\n";
  }
  if (has_ingest) {
    out += "  ingest (gradient bytes received a second):";
    for (std::size_t sh = 0; sh < ingest->size(); ++sh) {
      const auto& v = (*ingest)[sh];
      out += "  shard " + std::to_string(sh) + " " +
             (v.is_number() ? fmt("%.3f GB/s", v.get<double>()) : std::string("-"));
    }
    out += "\n";
  }
  if (busbw >= 0) {
    out += fmt("  allreduce: bus bandwidth %.3f GB/s (algbw %.3f GB/s, n = %.0f", busbw,
               number_or(s, "allreduce_algbw_gbps", 0.0), number_or(s, "workers", 0.0));
    out +=
        fmt(", %.2f MB a step, reduce p50 %.3f ms)\n", number_or(s, "allreduce_bytes", 0.0) / 1e6,
            1e3 * number_or(s, "allreduce_reduce_p50_s", 0.0));
  }
  return out;
}

}  // namespace syncopt::metrics
