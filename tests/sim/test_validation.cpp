// The simulation against real runs (CTest label `sim`): K = 5 workers and
// one shard, `mpirun -np 6 syncopt train` for a few hundred steps of a small
// MLP, then `syncopt simulate` of the same config fitted to that run
// (--from), and the two summaries compared. This machine oversubscribes six
// ranks on few cores, so a real step is mostly scheduling and polling, not
// compute: fitting the times to the run's own records is what makes the two
// agree. Each case prints its numbers (ctest -V, or --success).
//
//   sync, b = 0, bernoulli stragglers   median step time within 10 %
//   sync, b = 1, one slow worker        median step time within 10 %
//   async, exponential stragglers       mean staleness within 10 %, mean
//                                       step time within 15 % (the shard
//                                       rank's own scheduling hiccups stall
//                                       every worker at once and are in no
//                                       worker's overheads: the sim runs a
//                                       few % fast); its median step time is
//                                       printed, not held: with passes of the
//                                       shard loop taking several gradients
//                                       the inter-update times are bimodal
//                                       and the median falls between modes
//
// These runs exchange whole slices (exchange.pipeline = false, set on both
// sides). The pipelined exchange's case, `[.pipeline]`, is registered on
// its own (tests/CMakeLists.txt: sim_pipeline_vs_real) and exits 77, which
// CTest reports as skipped, while `syncopt train` does not pipeline: its
// records then show no per-bucket arrivals. Once they do, it fits the
// simulation to a pipeline-off run of the CNN, simulates both configs, and
// checks the simulated speed-up of the pipeline (median step time, off / on)
// against the real one within 10 %, and the off run within 10 %.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "../e2e/harness.hpp"

using namespace syncopt_test;
namespace fs = std::filesystem;

namespace {

constexpr double kTolerance = 0.10;
constexpr double kMeanStepTolerance = 0.15;  // async, a secondary check (see above)

struct Pair {
  nlohmann::json real, sim;
  double real_mean_step_s = 0.0, sim_mean_step_s = 0.0;
};

// Mean time between updates after the first (whose time is the real run's
// start-up: loading, first allocations), from shard 0's records.
double mean_step_s(const fs::path& run_dir) {
  std::vector<double> t;
  for (const auto& r : read_jsonl(run_dir / "steps.jsonl")) {
    if (r.value("shard", 0) == 0) t.push_back(r["t_apply"].get<double>());
  }
  REQUIRE(t.size() >= 2);
  std::sort(t.begin(), t.end());
  return (t.back() - t.front()) / static_cast<double>(t.size() - 1);
}

// One real run and its fitted simulation, in `dir`.
Pair real_and_sim(const fs::path& dir, const std::string& name, const std::string& sets) {
  const std::string common =
      " --set model.name=mlp --set train.batch=16 --set optim.ema=0 --set optim.lr=0.05"
      " --set train.steps=300 --set compute.threads=1 --set exchange.pipeline=false"
      " --set run.dir=" +
      dir.string() + " " + sets;
  const Result real =
      run_mpi(6, "train " + src("configs/smoke.toml") + " --quiet --set run.name=" + name + common);
  INFO(real.output);
  REQUIRE(real.code == 0);
  // The real run's own resolved config, simulated with 5 workers, network
  // time inside the fitted overheads (the ranks share a node), and the
  // shard loop's back-off as syncopt's (500 us).
  const Result sim = run("simulate " + (dir / name / "config.toml").string() + " --from " +
                         (dir / name).string() + " --set run.name=" + name +
                         "-sim --set sim.workers=5 --set sim.latency_us=0 "
                         "--set sim.bandwidth_gbps=0 --set sim.poll_max_us=500");
  INFO(sim.output);
  REQUIRE(sim.code == 0);
  const Result report = run("report " + (dir / (name + "-sim")).string());
  INFO(report.output);
  REQUIRE(report.code == 0);  // a simulated run reads like a real one
  return {nlohmann::json::parse(read_text(dir / name / "summary.json")),
          nlohmann::json::parse(read_text(dir / (name + "-sim") / "summary.json")),
          mean_step_s(dir / name), mean_step_s(dir / (name + "-sim"))};
}

double rel(double real, double sim) { return (sim - real) / real; }

double p50(const nlohmann::json& s) { return s["step_time_p50_s"].get<double>(); }

long long drops(const nlohmann::json& s) {
  long long n = 0;
  for (const auto& d : s["drops_per_worker"]) n += d.get<long long>();
  return n;
}

void print(const std::string& name, const Pair& p) {
  const auto& r = p.real;
  const auto& s = p.sim;
  std::printf(
      "%-20s step p50 real %.4f ms sim %.4f ms (%+.1f%%)  mean step real %.4f ms sim "
      "%.4f ms (%+.1f%%)  staleness real %.3f sim %.3f  drops real %lld sim %lld\n",
      name.c_str(), 1e3 * r["step_time_p50_s"].get<double>(),
      1e3 * s["step_time_p50_s"].get<double>(), 100 * rel(p50(r), p50(s)), 1e3 * p.real_mean_step_s,
      1e3 * p.sim_mean_step_s, 100 * rel(p.real_mean_step_s, p.sim_mean_step_s),
      r["staleness_mean"].get<double>(), s["staleness_mean"].get<double>(), drops(r), drops(s));
  std::fflush(stdout);
}

}  // namespace

TEST_CASE("sim vs real: sync, b = 0, bernoulli stragglers", "[sim][validation]") {
  const auto dir = temp_dir("sim-sync-b0");
  const Pair p = real_and_sim(dir, "sync-b0",
                              "--set train.mode=sync --set train.backups=0 "
                              "--set stragglers.model=bernoulli --set stragglers.prob=0.1 "
                              "--set stragglers.factor=10");
  print("sync b=0", p);
  CHECK(std::abs(rel(p50(p.real), p50(p.sim))) <= kTolerance);
  CHECK(p.sim["staleness_mean"].get<double>() == 0.0);
  fs::remove_all(dir);
}

TEST_CASE("sim vs real: sync, b = 1, one slow worker", "[sim][validation]") {
  const auto dir = temp_dir("sim-sync-b1");
  const Pair p = real_and_sim(dir, "sync-b1",
                              "--set train.mode=sync --set train.backups=1 "
                              "--set stragglers.model=fixed --set stragglers.workers=[4] "
                              "--set stragglers.mean_ms=5");
  print("sync b=1", p);
  CHECK(std::abs(rel(p50(p.real), p50(p.sim))) <= kTolerance);
  CHECK(drops(p.sim) > 0);
  fs::remove_all(dir);
}

TEST_CASE("sim vs real: async, exponential stragglers", "[sim][validation]") {
  const auto dir = temp_dir("sim-async");
  const Pair p = real_and_sim(dir, "async",
                              "--set train.mode=async --set stragglers.model=exponential "
                              "--set stragglers.mean_ms=10");
  print("async", p);
  CHECK(std::abs(rel(p.real["staleness_mean"].get<double>(),
                     p.sim["staleness_mean"].get<double>())) <= kTolerance);
  CHECK(std::abs(rel(p.real_mean_step_s, p.sim_mean_step_s)) <= kMeanStepTolerance);
  fs::remove_all(dir);
}

namespace {

// Whether a run's records show the pipelined exchange: a gradient record
// with per-bucket (or per-layer) arrival times, which whole-slice runs do
// not write.
bool records_show_buckets(const fs::path& run_dir) {
  for (const auto& r : read_jsonl(run_dir / "steps.jsonl")) {
    for (const auto& g : r["grads"]) {
      for (const auto& [key, value] : g.items()) {
        if (key.find("bucket") != std::string::npos || key.find("layer") != std::string::npos) {
          return true;
        }
      }
    }
  }
  return false;
}

}  // namespace

TEST_CASE("sim vs real: the pipelined exchange, the CNN, sync b = 1", "[.pipeline]") {
  const auto dir = temp_dir("sim-pipeline");
  const std::string common =
      "train " + src("configs/smoke.toml") +
      " --quiet --set model.name=cnn --set train.batch=16 --set optim.ema=0 --set optim.lr=0.02"
      " --set train.steps=200 --set compute.threads=1 --set train.mode=sync"
      " --set train.backups=1 --set stragglers.model=bernoulli --set stragglers.prob=0.1"
      " --set stragglers.factor=3 --set run.dir=" +
      dir.string();
  const Result on = run_mpi(6, common + " --set run.name=on --set exchange.pipeline=true");
  INFO(on.output);
  REQUIRE(on.code == 0);
  if (!records_show_buckets(dir / "on")) {
    std::printf(
        "SKIP: syncopt train does not pipeline yet (no per-bucket arrivals in its records)\n");
    std::fflush(stdout);
    fs::remove_all(dir);
    std::_Exit(77);  // CTest: skipped (SKIP_RETURN_CODE), never passed
  }
  const Result off = run_mpi(6, common + " --set run.name=off --set exchange.pipeline=false");
  INFO(off.output);
  REQUIRE(off.code == 0);
  // Both configs simulated with the times the whole-slice run measured: the
  // model's speed-up from the pipeline against the real one (the machine's
  // load moves a run's absolute times by more than 10 % from one run to
  // the next here; their ratio, from runs back to back, much less).
  const auto simulate = [&](const std::string& name) {
    const Result sim = run("simulate " + (dir / name / "config.toml").string() + " --from " +
                           (dir / "off").string() + " --set run.name=" + name +
                           "-sim --set sim.workers=5 --set sim.latency_us=0 "
                           "--set sim.bandwidth_gbps=0 --set sim.poll_max_us=500");
    INFO(sim.output);
    REQUIRE(sim.code == 0);
    return nlohmann::json::parse(read_text(dir / (name + "-sim") / "summary.json"));
  };
  const auto sim_on = simulate("on"), sim_off = simulate("off");
  CHECK(sim_on["sim"]["pipeline"] == true);
  CHECK(sim_off["sim"]["pipeline"] == false);
  const auto real_on = nlohmann::json::parse(read_text(dir / "on" / "summary.json"));
  const auto real_off = nlohmann::json::parse(read_text(dir / "off" / "summary.json"));
  const double real_speedup = p50(real_off) / p50(real_on);
  const double sim_speedup = p50(sim_off) / p50(sim_on);
  std::printf(
      "pipeline: step p50 real off %.4f on %.4f ms (x%.3f), sim off %.4f on %.4f ms (x%.3f)\n",
      1e3 * p50(real_off), 1e3 * p50(real_on), real_speedup, 1e3 * p50(sim_off), 1e3 * p50(sim_on),
      sim_speedup);
  std::fflush(stdout);
  CHECK(std::abs(sim_speedup / real_speedup - 1.0) <= kTolerance);
  CHECK(std::abs(rel(p50(real_off), p50(sim_off))) <= kTolerance);
  fs::remove_all(dir);
}
