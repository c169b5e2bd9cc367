// How far from the limit (docs/outputs.md, summary.json's compute_*,
// shard_ingest_gbps, allreduce_*): the figures of summary.json and of
// `syncopt report` are those the records imply, recomputed here from
// steps.jsonl and the model's FLOPs and parameters as `--dry-run` prints
// them; the one-core peak is positive, cheap and recorded with this
// machine's CPU model.
#include <catch2/catch.hpp>
#include <fstream>

#include "../e2e/harness.hpp"

using namespace syncopt_test;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

const std::string kModel =
    " --set model.name=mlp --set train.batch=16 --set optim.ema=0 --set train.steps=40"
    " --set compute.threads=1 --quiet";

struct Run {
  json summary;
  std::vector<json> steps;
  std::string report;
};

Run train(const fs::path& dir, const std::string& name, int np, const std::string& sets) {
  const Result r =
      run_mpi(np, "train " + src("configs/smoke.toml") + " --set run.dir=" + dir.string() +
                      " --set run.name=" + name + kModel + " " + sets);
  INFO(r.output);
  REQUIRE(r.code == 0);
  const Result rep = run("report " + (dir / name).string());
  INFO(rep.output);
  REQUIRE(rep.code == 0);
  return {json::parse(read_text(dir / name / "summary.json")),
          read_jsonl(dir / name / "steps.jsonl"), rep.output};
}

// The model's forward MFLOPs and parameters per `--dry-run`'s total line
// ("total: 101908 params (...) in 6 tensors, 0.20 MFLOPs forward ...").
std::pair<double, long long> dry_run_model() {
  const Result r = run("train " + src("configs/smoke.toml") + kModel + " --dry-run");
  REQUIRE(r.code == 0);
  const auto at = r.output.find("total: ");
  REQUIRE(at != std::string::npos);
  long long params = 0;
  double mflops = 0.0;
  const std::string line = r.output.substr(at, r.output.find('\n', at) - at);
  INFO(line);
  REQUIRE(std::sscanf(line.c_str(), "total: %lld params", &params) == 1);
  const auto comma = line.rfind(", ");
  REQUIRE(std::sscanf(line.c_str() + comma + 2, "%lf MFLOPs", &mflops) == 1);
  return {mflops, params};
}

std::string proc_cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find_first_not_of(" \t:", 10));
  }
  return "unknown";
}

// Linear interpolation between order statistics, as numpy's default.
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const double pos = 0.5 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(pos);
  const double hi = lo + 1 < v.size() ? v[lo + 1] : v[lo];
  return v[lo] + (hi - v[lo]) * (pos - static_cast<double>(lo));
}

// The model's inputs and the machine, then the compute rate from shard 0's
// gradients: 3 x forward FLOPs x examples over their compute_s.
void check_compute(const Run& run, int workers) {
  const auto& s = run.summary;
  INFO(s.dump(1));
  const auto [mflops, params] = dry_run_model();
  const double F = s["model_flops_per_example"].get<double>();
  CHECK(std::abs(F / 1e6 - mflops) <= 0.0051);  // --dry-run prints two decimals
  CHECK(s["param_count"].get<long long>() == params);
  const auto& m = s["machine"];
  CHECK(m["cpu"] == proc_cpu_model());
  CHECK(m["cpu"] != "unknown");
  const double peak = m["one_core_peak_gflops"].get<double>();
  CHECK(peak > 1.0);
  CHECK(m["peak_measure_s"].get<double>() < 0.3);  // the bound of issue 26
  std::vector<double> flops(workers, 0.0), secs(workers, 0.0);
  for (const auto& r : run.steps) {
    if (r["shard"] != 0) continue;
    for (const auto& g : r["grads"]) {
      const int w = g["worker"];
      flops[w] += 3.0 * F * g.value("examples", 16);
      secs[w] += g["compute_s"].get<double>();
    }
  }
  double all_f = 0, all_s = 0;
  for (int w = 0; w < workers; ++w) {
    CHECK(s["compute_gflops_by_worker"][w].get<double>() ==
          Approx(flops[w] / secs[w] / 1e9).epsilon(1e-9));
    all_f += flops[w];
    all_s += secs[w];
  }
  const double rate = all_f / all_s / 1e9;
  CHECK(s["compute_gflops_per_worker"].get<double>() == Approx(rate).epsilon(1e-9));
  CHECK(s["compute_peak_fraction"].get<double>() == Approx(rate / peak).epsilon(1e-9));
  // A small MLP on one thread stays well below an sgemm's peak.
  CHECK(s["compute_peak_fraction"].get<double>() < 1.5);
  INFO(run.report);
  CHECK(run.report.find("how far from the limit (" + proc_cpu_model()) != std::string::npos);
  char text[64];
  std::snprintf(text, sizeof(text), "compute: %.2f GFLOP/s per worker", rate);
  CHECK(run.report.find(text) != std::string::npos);
  std::snprintf(text, sizeof(text), "%.0f %% of this CPU's measured one-core peak %.1f",
                100 * rate / peak, peak);
  CHECK(run.report.find(text) != std::string::npos);
}

}  // namespace

TEST_CASE("how far from the limit: sync, compute rate and each shard's ingest", "[limits]") {
  const auto dir = temp_dir("limits-sync");
  const Run run =
      train(dir, "sync", 5, "--set train.mode=sync --set cluster.ps=2 --set train.backups=1");
  check_compute(run, 3);
  const auto& s = run.summary;
  const auto& counts = s["shard_param_counts"];
  REQUIRE(counts.size() == 2);
  CHECK(counts[0].get<long long>() + counts[1].get<long long>() == s["param_count"]);
  for (int sh = 0; sh < 2; ++sh) {
    double first = 1e30, last = -1e30, grads = 0;
    for (const auto& r : run.steps) {
      if (r["shard"] != sh) continue;
      first = std::min(first, r["t_start"].get<double>());
      last = std::max(last, r["t_apply"].get<double>());
      grads += static_cast<double>(r["grads"].size());
    }
    const double gbps = grads * counts[sh].get<double>() * 4.0 / (last - first) / 1e9;
    CHECK(s["shard_ingest_gbps"][sh].get<double>() == Approx(gbps).epsilon(1e-9));
    char text[64];
    std::snprintf(text, sizeof(text), "shard %d %.3f GB/s", sh, gbps);
    CHECK(run.report.find(text) != std::string::npos);
  }
  CHECK(s["allreduce_busbw_gbps"].is_null());
  fs::remove_all(dir);
}

TEST_CASE("how far from the limit: allreduce, compute rate and bus bandwidth", "[limits]") {
  const auto dir = temp_dir("limits-allreduce");
  const Run run = train(dir, "allreduce", 3, "--set train.mode=allreduce");
  check_compute(run, 3);
  const auto& s = run.summary;
  // Per step the least reduce of any rank (the last to arrive waits for
  // nobody); algbw = the gradient's bytes over their median.
  std::vector<double> least;
  for (const auto& r : run.steps) {
    double t = 1e30;
    for (const auto& g : r["grads"]) t = std::min(t, g["phases"]["reduce"].get<double>());
    least.push_back(t);
  }
  const double bytes = 4.0 * s["param_count"].get<double>();
  const double algbw = bytes / median(least) / 1e9;
  const double busbw = algbw * 2.0 * (3 - 1) / 3;
  CHECK(s["allreduce_algbw_gbps"].get<double>() == Approx(algbw).epsilon(1e-9));
  CHECK(s["allreduce_busbw_gbps"].get<double>() == Approx(busbw).epsilon(1e-9));
  char text[96];
  std::snprintf(text, sizeof(text), "bus bandwidth %.3f GB/s (algbw %.3f GB/s, n = 3", busbw,
                algbw);
  INFO(run.report);
  CHECK(run.report.find(text) != std::string::npos);
  CHECK(s["shard_ingest_gbps"].is_null());
  fs::remove_all(dir);
}
