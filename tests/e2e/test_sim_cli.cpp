// `syncopt simulate` and `syncopt plan` as a user runs them: a simulated run
// directory that report and scripts/plot.py read like a real one, the same
// records for the same seed, the exit codes of bad input, and a plan with
// its JSON and plot.
#include <catch2/catch.hpp>
#include <filesystem>

#include "harness.hpp"

using namespace syncopt_test;
namespace fs = std::filesystem;

namespace {

// A small simulated cluster: 8 workers, N = 6, exponential stragglers.
std::string sim_args(const fs::path& dir, const std::string& name) {
  return "simulate " + src("configs/smoke.toml") + " --set run.dir=" + dir.string() +
         " --set run.name=" + name +
         " --set train.mode=sync --set train.backups=2 --set train.steps=200"
         " --set sim.workers=8 --set sim.compute_ms=20 --set sim.compute_cv=0.2"
         " --set stragglers.model=exponential --set stragglers.mean_ms=10";
}

}  // namespace

TEST_CASE("simulate writes a run directory that report and plot.py read", "[e2e][sim]") {
  const auto dir = temp_dir("simulate");
  const Result r = run(sim_args(dir, "a"));
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("simulated 200 updates") != std::string::npos);
  const auto run_dir = dir / "a";
  for (const char* f : {"config.toml", "steps.jsonl", "summary.json"}) {
    CHECK(fs::exists(run_dir / f));
  }
  const auto steps = read_jsonl(run_dir / "steps.jsonl");
  REQUIRE(steps.size() == 200);
  for (const auto& s : steps) {
    CHECK(s["clock"] == "simulated");
    int accepted = 0;
    for (const auto& g : s["grads"]) accepted += g["accepted"].get<bool>() ? 1 : 0;
    CHECK(accepted == 6);
  }
  const auto summary = nlohmann::json::parse(read_text(run_dir / "summary.json"));
  CHECK(summary["clock"] == "simulated");
  CHECK(summary["N"] == 6);
  CHECK(summary["b"] == 2);
  CHECK(summary["sim"]["workers"] == 8);
  CHECK(summary["steps"] == 200);
  CHECK(summary["time_to_kth_samples"].size() == 8);
  // The config written back simulates the same run.
  CHECK(read_text(run_dir / "config.toml").find("[sim]\nworkers = 8") != std::string::npos);
  const Result rep = run("report " + run_dir.string());
  INFO(rep.output);
  CHECK(rep.code == 0);
  CHECK(rep.output.find("time to the k-th gradient") != std::string::npos);
  const Result plot = run_command("python3 " + src("scripts/plot.py") + " " + run_dir.string());
  INFO(plot.output);
  CHECK(plot.code == 0);
  CHECK(fs::exists(run_dir / "kth_gradient_cdf.png"));
  fs::remove_all(dir);
}

TEST_CASE("simulate: the same config gives the same records, another sim.seed others",
          "[e2e][sim]") {
  const auto dir = temp_dir("simulate-seed");
  REQUIRE(run(sim_args(dir, "a")).code == 0);
  REQUIRE(run(sim_args(dir, "b")).code == 0);
  REQUIRE(run(sim_args(dir, "c") + " --set sim.seed=2").code == 0);
  const std::string a = read_text(dir / "a" / "steps.jsonl");
  CHECK(a == read_text(dir / "b" / "steps.jsonl"));
  CHECK(a != read_text(dir / "c" / "steps.jsonl"));
  fs::remove_all(dir);
}

TEST_CASE("simulate: bad input exits with its code", "[e2e][sim]") {
  const auto dir = temp_dir("simulate-bad");
  const Result missing = run(sim_args(dir, "a") + " --from " + (dir / "nope").string());
  CHECK(missing.code == 66);
  CHECK(missing.output.find("not found") != std::string::npos);
  const Result local = run(sim_args(dir, "b") + " --set train.mode=local");
  CHECK(local.code == 78);
  CHECK(local.output.find("parameter-server modes (sync, async, softsync, ssp, timeout) and "
                          "allreduce") != std::string::npos);
  // allreduce is simulated from the [sim] keys; a fit to a run is refused.
  const Result fitted =
      run(sim_args(dir, "b2") + " --set train.mode=allreduce --from " + dir.string());
  CHECK(fitted.code == 78);
  CHECK(fitted.output.find("fits the parameter-server modes") != std::string::npos);
  const Result backups = run(sim_args(dir, "c") + " --set train.backups=8");
  CHECK(backups.code == 78);
  CHECK(backups.output.find("sim.workers = 8") != std::string::npos);
  CHECK(run(sim_args(dir, "d") + " --set sim.compute_dist=normal").code == 78);
  REQUIRE(run(sim_args(dir, "e")).code == 0);
  CHECK(run(sim_args(dir, "e")).code == 73);  // the run directory exists
  fs::remove_all(dir);
}

TEST_CASE("plan: the best N for K workers from simulations, as a table, JSON and a plot",
          "[e2e][plan]") {
  const auto dir = temp_dir("plan");
  const std::string out = (dir / "plan.json").string();
  const Result r = run("plan -K 8 --sim " + src("configs/smoke.toml") +
                       " --set train.steps=100 --set sim.compute_ms=20 --set sim.compute_cv=0.2"
                       " --set stragglers.model=exponential --set stragglers.mean_ms=10"
                       " --iters 100,2000 --n 4:8 --out " +
                       out);
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK(r.output.find("best: N = ") != std::string::npos);
  const auto plan = nlohmann::json::parse(read_text(out));
  CHECK(plan["workers"] == 8);
  CHECK(plan["rows"].size() == 5);
  CHECK(plan["iters_model"]["c"] == 2000.0);
  const int best = plan["best"]["N"].get<int>();
  for (const auto& row : plan["rows"]) {
    CHECK(row["time_s"].get<double>() >= plan["best"]["time_s"].get<double>());
    CHECK(row["b"].get<int>() == 8 - row["N"].get<int>());
  }
  CHECK(best >= 4);
  const Result plot = run_command("python3 " + src("scripts/plot_plan.py") + " " + out);
  INFO(plot.output);
  CHECK(plot.code == 0);
  CHECK(fs::exists(dir / "plan.png"));
  fs::remove_all(dir);
}

TEST_CASE("plan without step times or an I(N) is a usage error", "[e2e][plan]") {
  CHECK(run("plan -K 8 --iters 1,2").code == 64);
  CHECK(run("plan -K 8 --sim " + src("configs/smoke.toml")).code == 64);
  CHECK(run("plan -K 8 --sim " + src("configs/smoke.toml") + " --iters 1,2 --n 0:9").code == 64);
  CHECK(run("plan --sim x.toml --iters 1,2").code == 64);  // -K is required
}

TEST_CASE("simulate --from takes the run's K and says so, unless --set sim.workers is given",
          "[e2e][sim]") {
  const auto dir = temp_dir("simulate-from-k");
  // A K = 8 run to fit to (a simulated one: --from reads any run's records).
  REQUIRE(run(sim_args(dir, "a")).code == 0);
  const std::string base = "simulate " + src("configs/smoke.toml") +
                           " --set run.dir=" + dir.string() +
                           " --set train.mode=sync --set train.backups=2" +
                           " --set train.steps=100 --from " + (dir / "a").string();
  // configs/smoke.toml leaves sim.workers at its default (5): the run's 8 must win.
  const Result own = run(base + " --set run.name=own");
  INFO(own.output);
  REQUIRE(own.code == 0);
  CHECK(own.output.find("sim.workers = 8, the run's K") != std::string::npos);
  const auto s = nlohmann::json::parse(read_text(dir / "own" / "summary.json"));
  CHECK(s["sim"]["workers"] == 8);
  const auto a = nlohmann::json::parse(read_text(dir / "a" / "summary.json"));
  // The k-th-gradient profile is what tells a wrong K: one entry per worker.
  CHECK(s["time_to_kth_mean_s"].size() == a["time_to_kth_mean_s"].size());
  const Result other = run(base + " --set run.name=other --set sim.workers=5");
  INFO(other.output);
  REQUIRE(other.code == 0);
  CHECK(other.output.find("sim.workers = 5 (--set; the run had K = 8)") != std::string::npos);
  const auto o = nlohmann::json::parse(read_text(dir / "other" / "summary.json"));
  CHECK(o["sim"]["workers"] == 5);
  CHECK(o["time_to_kth_mean_s"].size() != a["time_to_kth_mean_s"].size());
  fs::remove_all(dir);
}
