// Multi-rank behaviour of the distributed modes, run as a user runs them:
// `mpirun -np K syncopt train ...`, then the run's records are checked.
// Each mpirun is bounded by a timeout, so a hang fails instead of stalling.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <set>

#include "../e2e/harness.hpp"

using namespace syncopt_test;
namespace fs = std::filesystem;

namespace {

// A small deterministic job: logistic regression on synthetic data, one
// compute thread, no EMA, plain momentum SGD.
std::string job(const fs::path& dir, const std::string& name, const std::string& extra) {
  return "train " + src("configs/smoke.toml") + " --quiet --set run.dir=" + dir.string() +
         " --set run.name=" + name +
         " --set model.name=logreg --set train.batch=8 --set optim.ema=0 --set optim.lr=0.1 " +
         extra;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(double(a[i]) - double(b[i])));
  return m;
}

}  // namespace

TEST_CASE("sync applies exactly N fresh gradients and counts every drop", "[mpi][sync]") {
  // 1 PS + 4 workers, N = 3, b = 1, worker 3 slower by 150 ms. Which worker
  // is late at a given step depends on the machine's timing, so this run
  // checks what holds whatever the timing; that a late worker is never
  // applied is shown exactly, with the order of events fixed by messages,
  // by shard_mpi_np5 (tests/mpi/test_shard_mpi.cpp).
  const auto dir = temp_dir("exact");
  const Result r = run_mpi(5, job(dir, "exact",
                                  "--set train.mode=sync --set train.backups=1 --set "
                                  "train.steps=250 --set model.name=mlp --set "
                                  "stragglers.model=fixed --set stragglers.workers=[3] "
                                  "--set stragglers.mean_ms=150"));
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto steps = read_jsonl(dir / "exact" / "steps.jsonl");
  REQUIRE(steps.size() == 250);
  std::vector<std::int64_t> dropped(4, 0), accepted_by(4, 0);
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const auto& rec = steps[i];
    CHECK(rec["step"].get<std::uint64_t>() == i + 1);
    CHECK(rec["version"].get<std::uint64_t>() == i);
    std::set<int> contributors;
    int accepted = 0;
    for (const auto& g : rec["grads"]) {
      const int w = g["worker"].get<int>();
      const bool acc = g["accepted"].get<bool>();
      ++(acc ? accepted_by : dropped)[static_cast<std::size_t>(w)];
      if (!acc) continue;
      ++accepted;
      CHECK(g["version"] == rec["version"]);  // fresh: computed on this step's version
      CHECK(contributors.insert(w).second);   // no worker twice in a step
    }
    CHECK(accepted == 3);
    CHECK(rec["used"].get<int>() == 3);
  }
  // Every gradient not applied was counted as a drop, for every worker.
  const auto summary = nlohmann::json::parse(read_text(dir / "exact" / "summary.json"));
  for (std::size_t w = 0; w < 4; ++w) {
    CHECK(summary["drops_per_worker"][w].get<std::int64_t>() == dropped[w]);
    CHECK(summary["accepted_per_worker"][w].get<std::int64_t>() == accepted_by[w]);
  }
  fs::remove_all(dir);
}

TEST_CASE("under the virtual clock the slow worker is never applied and stays busy, exactly",
          "[mpi][sync][virtual]") {
  // The same set-up as above, but which N of N + b count is decided by the
  // modelled finish times (10 ms compute, worker 3 150 ms later), not by
  // the machine: every gradient of worker 3 is late, and it is busy for
  // ~160 ms with each one, so it sends one every ~15 steps (its lost time
  // carries over, as in a real run and in syncopt simulate).
  const auto dir = temp_dir("exact-virtual");
  const Result r = run_mpi(5, job(dir, "exact",
                                  "--set train.mode=sync --set train.backups=1 --set "
                                  "train.steps=250 --set model.name=mlp --set train.clock=virtual "
                                  "--set sim.compute_ms=10 --set sim.compute_cv=0.1 "
                                  "--set stragglers.model=fixed --set stragglers.workers=[3] "
                                  "--set stragglers.mean_ms=150"));
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto steps = read_jsonl(dir / "exact" / "steps.jsonl");
  REQUIRE(steps.size() == 250);
  std::int64_t slow_dropped = 0;
  double last_slow = 0.0;  // virtual time worker 3's previous gradient was done
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const auto& rec = steps[i];
    CHECK(rec["clock"] == "virtual");
    CHECK(rec["version"].get<std::uint64_t>() == i);
    std::set<int> contributors;
    for (const auto& g : rec["grads"]) {
      const int w = g["worker"].get<int>();
      if (!g["accepted"].get<bool>()) {
        CHECK(w == 3);  // only the slow one is ever late
        ++slow_dropped;
        const double done = rec["t_start"].get<double>() + g["arrival_s"].get<double>();
        CHECK(done - last_slow > 0.150);  // its compute and its 150 ms, from its last one
        last_slow = done;
        continue;
      }
      CHECK(g["version"] == rec["version"]);
      CHECK(contributors.insert(w).second);
      CHECK(w != 3);  // never applied, from the first step on
    }
    CHECK(contributors == std::set<int>{0, 1, 2});
    // The step lasts until its third finish time: ~10 ms, never the 160 ms of worker 3.
    CHECK(rec["t_apply"].get<double>() - rec["t_start"].get<double>() < 0.05);
  }
  // ~2.75 virtual seconds of steps (11 ms each), a gradient of worker 3
  // every ~0.16 s: 17 of them here.
  CHECK(slow_dropped >= 15);
  CHECK(slow_dropped <= 18);
  const auto summary = nlohmann::json::parse(read_text(dir / "exact" / "summary.json"));
  CHECK(summary["drops_per_worker"][3].get<std::int64_t>() == slow_dropped);
  CHECK(summary["accepted_per_worker"][3].get<std::int64_t>() == 0);
  CHECK(summary["clock"] == "virtual");
  fs::remove_all(dir);
}

TEST_CASE("virtual-clock runs with b = 1 are bitwise repeatable", "[mpi][sync][virtual]") {
  const auto dir = temp_dir("repeat-virtual");
  const std::string args =
      " --set train.mode=sync --set train.backups=1 --set train.steps=60 --set model.name=mlp "
      "--set train.clock=virtual --set sim.compute_ms=10 --set sim.compute_cv=0.3 "
      "--set stragglers.model=exponential --set stragglers.mean_ms=8 --set optim.ema=0.9";
  const Result a = run_mpi(5, job(dir, "a", args));
  const Result b = run_mpi(5, job(dir, "b", args));
  INFO(a.output << b.output);
  REQUIRE(a.code == 0);
  REQUIRE(b.code == 0);
  CHECK(read_floats(dir / "a" / "params.f32") == read_floats(dir / "b" / "params.f32"));
  CHECK(read_floats(dir / "a" / "params_ema.f32") == read_floats(dir / "b" / "params_ema.f32"));
  CHECK(read_text(dir / "a" / "steps.jsonl") == read_text(dir / "b" / "steps.jsonl"));
  // And the backups did something: some steps dropped someone (at most
  // one per step, N = 3 of 4; none when the one left out was still busy
  // with an older version).
  const auto summary = nlohmann::json::parse(read_text(dir / "a" / "summary.json"));
  std::int64_t drops = 0;
  for (const auto& d : summary["drops_per_worker"]) drops += d.get<std::int64_t>();
  CHECK(drops > 20);
  CHECK(drops <= 60);
  fs::remove_all(dir);
}

TEST_CASE("with several shards every sync step applies the same N workers on every shard",
          "[mpi][sync][shards]") {
  // 2 shards + 4 workers, N = 3, stragglers so that who is late changes:
  // shard 0 decides, shard 1 follows (train.agree_shards, the default).
  const auto dir = temp_dir("agree");
  const std::string args =
      " --set train.mode=sync --set train.backups=1 --set train.steps=200 --set model.name=mlp "
      "--set cluster.ps=2 --set stragglers.model=bernoulli --set stragglers.prob=0.3 "
      "--set stragglers.factor=4";
  const Result r = run_mpi(6, job(dir, "agree", args));
  INFO(r.output);
  REQUIRE(r.code == 0);
  std::map<std::pair<int, std::uint64_t>, std::set<int>> used;  // (shard, version) -> workers
  for (const auto& rec : read_jsonl(dir / "agree" / "steps.jsonl")) {
    auto& set = used[{rec["shard"].get<int>(), rec["version"].get<std::uint64_t>()}];
    for (const auto& g : rec["grads"]) {
      if (g["accepted"].get<bool>()) set.insert(g["worker"].get<int>());
    }
  }
  for (std::uint64_t v = 0; v < 200; ++v) {
    INFO("version " << v);
    CHECK(used[{0, v}].size() == 3);
    CHECK(used[{0, v}] == used[{1, v}]);
  }
  const auto summary = nlohmann::json::parse(read_text(dir / "agree" / "summary.json"));
  CHECK(summary["cross_shard_disagreements"].get<std::int64_t>() == 0);
  fs::remove_all(dir);
}

TEST_CASE("sync with b = 0, allreduce and local with batch N*B give the same parameters",
          "[mpi][equivalence]") {
  const auto dir = temp_dir("equiv");
  // Under a schedule, so that an lr taken one update early or late shows.
  const std::string common = " --set train.steps=10 --set optim.schedule=linear_anneal";
  const Result sync =
      run_mpi(4, job(dir, "sync", "--set train.mode=sync --set train.backups=0" + common));
  INFO(sync.output);
  REQUIRE(sync.code == 0);
  const Result ar = run_mpi(3, job(dir, "allreduce", "--set train.mode=allreduce" + common));
  INFO(ar.output);
  REQUIRE(ar.code == 0);
  const Result local =
      run("train " + src("configs/smoke.toml") + " --quiet --set run.dir=" + dir.string() +
          " --set run.name=local --set model.name=logreg "
          "--set train.batch=24 --set optim.ema=0 --set optim.lr=0.1" +
          common);
  INFO(local.output);
  REQUIRE(local.code == 0);
  const auto p_sync = read_floats(dir / "sync" / "params.f32");
  const auto p_ar = read_floats(dir / "allreduce" / "params.f32");
  const auto p_local = read_floats(dir / "local" / "params.f32");
  REQUIRE(!p_sync.empty());
  CHECK(max_abs_diff(p_sync, p_ar) < 1e-5);
  CHECK(max_abs_diff(p_sync, p_local) < 1e-5);
  // The same lr at every step: the shard's, allreduce's and the local
  // loop's schedules count the same examples before each update.
  const auto lrs = [&](const std::string& name) {
    std::vector<double> out;
    for (const auto& rec : read_jsonl(dir / name / "steps.jsonl")) out.push_back(rec["lr"]);
    return out;
  };
  const auto lr_local = lrs("local");
  REQUIRE(lr_local.size() == 10);
  CHECK(lr_local.front() > lr_local.back());  // the schedule is not constant
  CHECK(lrs("sync") == lr_local);
  CHECK(lrs("allreduce") == lr_local);
  // And training moved them: the comparison is not between initial values.
  const Result zero =
      run("train " + src("configs/smoke.toml") + " --quiet --set run.dir=" + dir.string() +
          " --set run.name=init --set model.name=logreg "
          "--set train.batch=24 --set optim.ema=0 --set optim.lr=1e-12 --set train.steps=1");
  REQUIRE(zero.code == 0);
  CHECK(max_abs_diff(p_sync, read_floats(dir / "init" / "params.f32")) > 1e-3);
  fs::remove_all(dir);
}

TEST_CASE("with the EMA on, sync b = 0, allreduce and local agree on theta and its average",
          "[mpi][equivalence][ema]") {
  // The shards keep the EMA of their slices; allreduce and local keep it
  // whole. Same updates, same decay: the same averages.
  const auto dir = temp_dir("equiv-ema");
  // A decay below the warm-up rate (1 + t) / (10 + t) after a few steps, and
  // not the momentum (0.9), so that a shard using the wrong decay differs.
  const std::string common = " --set train.steps=12 --set optim.ema=0.4";
  const Result sync =
      run_mpi(4, job(dir, "sync", "--set train.mode=sync --set train.backups=0" + common));
  INFO(sync.output);
  REQUIRE(sync.code == 0);
  const Result ar = run_mpi(3, job(dir, "allreduce", "--set train.mode=allreduce" + common));
  INFO(ar.output);
  REQUIRE(ar.code == 0);
  const Result local =
      run("train " + src("configs/smoke.toml") + " --quiet --set run.dir=" + dir.string() +
          " --set run.name=local --set model.name=logreg "
          "--set train.batch=24 --set optim.lr=0.1" +
          common);
  INFO(local.output);
  REQUIRE(local.code == 0);
  const auto e_sync = read_floats(dir / "sync" / "params_ema.f32");
  const auto e_ar = read_floats(dir / "allreduce" / "params_ema.f32");
  const auto e_local = read_floats(dir / "local" / "params_ema.f32");
  REQUIRE(!e_sync.empty());
  CHECK(max_abs_diff(e_sync, e_ar) < 1e-5);
  CHECK(max_abs_diff(e_sync, e_local) < 1e-5);
  CHECK(max_abs_diff(read_floats(dir / "sync" / "params.f32"),
                     read_floats(dir / "local" / "params.f32")) < 1e-5);
  // The average lags theta: the comparison is not of theta with itself.
  CHECK(max_abs_diff(e_sync, read_floats(dir / "sync" / "params.f32")) > 1e-4);
  fs::remove_all(dir);
}

TEST_CASE("optim.scale_lr_by_n multiplies the lr of every update by N", "[mpi][lr]") {
  // 1 PS + 4 workers, b = 1: N = 3 (not K = 4); constant schedule.
  const auto dir = temp_dir("lr");
  const Result r = run_mpi(5, job(dir, "sync",
                                  "--set train.mode=sync --set train.backups=1 "
                                  "--set train.steps=6 --set optim.scale_lr_by_n=true"));
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto steps = read_jsonl(dir / "sync" / "steps.jsonl");
  REQUIRE(steps.size() == 6);
  for (const auto& rec : steps) CHECK(rec["lr"].get<double>() == Approx(0.3));  // 3 x 0.1
  const Result ar = run_mpi(3, job(dir, "ar",
                                   "--set train.mode=allreduce --set train.steps=3 "
                                   "--set optim.scale_lr_by_n=true"));
  REQUIRE(ar.code == 0);
  for (const auto& rec : read_jsonl(dir / "ar" / "steps.jsonl")) {
    CHECK(rec["lr"].get<double>() == Approx(0.3));  // N = 3 ranks
  }
  fs::remove_all(dir);
}

TEST_CASE("several shards give the same result as one", "[mpi][shards]") {
  const auto dir = temp_dir("shards");
  // A shard holds whole layers: the CNN's four, on three shards.
  const std::string common =
      " --set train.mode=sync --set train.backups=0 --set train.steps=12 --set model.name=cnn";
  const Result one = run_mpi(4, job(dir, "one", "--set cluster.ps=1" + common));
  INFO(one.output);
  REQUIRE(one.code == 0);
  const Result three = run_mpi(6, job(dir, "three", "--set cluster.ps=3" + common));
  INFO(three.output);
  REQUIRE(three.code == 0);
  const auto a = read_floats(dir / "one" / "params.f32");
  const auto b = read_floats(dir / "three" / "params.f32");
  REQUIRE(!a.empty());
  // Same N gradients per step, summed in worker order, element-wise optimiser:
  // bitwise identical.
  CHECK(max_abs_diff(a, b) == 0.0);
  // Every shard logged every step.
  const auto steps = read_jsonl(dir / "three" / "steps.jsonl");
  std::map<int, int> per_shard;
  for (const auto& s : steps) ++per_shard[s["shard"].get<int>()];
  CHECK(per_shard.size() == 3);
  for (const auto& [shard, n] : per_shard) CHECK(n == 12);
  fs::remove_all(dir);
}

TEST_CASE("async staleness matches the shard's version history", "[mpi][async]") {
  const auto dir = temp_dir("async");
  const Result r = run_mpi(5, job(dir, "async",
                                  "--set train.mode=async --set train.steps=40 "
                                  "--set stragglers.model=exponential "
                                  "--set stragglers.mean_ms=3 --set stragglers.seed=5"));
  INFO(r.output);
  REQUIRE(r.code == 0);
  const auto steps = read_jsonl(dir / "async" / "steps.jsonl");
  REQUIRE(steps.size() == 40);
  std::map<int, std::uint64_t> last_read;
  std::int64_t max_staleness = 0;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const auto& rec = steps[i];
    const auto version = rec["version"].get<std::uint64_t>();
    CHECK(version == i);  // one update per gradient, in order
    REQUIRE(rec["grads"].size() == 1);
    const auto& g = rec["grads"][0];
    const auto read = g["version"].get<std::uint64_t>();
    CHECK(read <= version);
    CHECK(g["staleness"].get<std::int64_t>() == static_cast<std::int64_t>(version - read));
    CHECK(g["accepted"].get<bool>());
    const int w = g["worker"].get<int>();
    if (last_read.count(w)) CHECK(read > last_read[w]);  // a worker reads ever newer versions
    last_read[w] = read;
    max_staleness = std::max<std::int64_t>(max_staleness, g["staleness"].get<std::int64_t>());
  }
  CHECK(last_read.size() == 4);
  const auto summary = nlohmann::json::parse(read_text(dir / "async" / "summary.json"));
  CHECK(summary["staleness_max"].get<double>() == Approx(max_staleness));
  fs::remove_all(dir);
}

TEST_CASE("every mode ends by itself with a slow worker at the last step", "[mpi][shutdown]") {
  const auto dir = temp_dir("shutdown");
  const std::vector<std::pair<std::string, std::string>> modes = {
      {"sync-b1", "--set train.mode=sync --set train.backups=1"},
      {"sync-b0", "--set train.mode=sync --set train.backups=0"},
      {"async", "--set train.mode=async"},
      {"softsync", "--set train.mode=softsync --set train.softsync_c=2"},
      {"ssp", "--set train.mode=ssp --set train.ssp_bound=1"},
      {"timeout", "--set train.mode=timeout --set train.timeout_ms=20"},
      {"allreduce", "--set train.mode=allreduce"},
      {"sync-2ps-eval",
       "--set train.mode=sync --set cluster.ps=2 --set cluster.evaluator=true "
       "--set eval.every_steps=3 --set model.name=mlp"},
  };
  for (const auto& [name, args] : modes) {
    const int np = name == "sync-2ps-eval" ? 7 : 5;
    const Result r =
        run_mpi(np,
                job(dir, name,
                    args + " --set train.steps=8 --set stragglers.model=fixed "
                           "--set stragglers.workers=[3] --set stragglers.mean_ms=120"),
                120);
    INFO(name << "\n" << r.output);
    CHECK(r.code == 0);
    CHECK(fs::exists(dir / name / "summary.json"));
  }
  fs::remove_all(dir);
}

TEST_CASE("a layout that does not fit the world is one config error on every rank",
          "[mpi][layout]") {
  const auto dir = temp_dir("layout");
  const Result r = run_mpi(3, job(dir, "bad", "--set train.mode=sync --set train.backups=2"), 60);
  CHECK(r.code == 78);
  CHECK(r.output.find("train.backups") != std::string::npos);
  // Printed once (rank 0), not once per rank.
  std::size_t count = 0;
  for (auto pos = r.output.find("the rank layout does not fit"); pos != std::string::npos;
       pos = r.output.find("the rank layout does not fit", pos + 1)) {
    ++count;
  }
  CHECK(count == 1);
  // Too little data for the workers: caught before the roles start, on every rank.
  const Result small = run_mpi(6,
                               job(dir, "small",
                                   "--set train.mode=sync --set train.batch=1 "
                                   "--set data.synthetic_train=3"),
                               60);
  CHECK(small.code == 78);
  CHECK(small.output.find("cannot feed") != std::string::npos);
  // A data error on every rank is reported once (by the lowest rank), 66.
  const Result nodata = run_mpi(4,
                                job(dir, "nodata",
                                    "--set train.mode=sync --set data.name=idx "
                                    "--set data.path=/nonexistent"),
                                60);
  CHECK(nodata.code == 66);
  std::size_t errors = 0;
  for (auto pos = nodata.output.find("syncopt: error"); pos != std::string::npos;
       pos = nodata.output.find("syncopt: error", pos + 1)) {
    ++errors;
  }
  CHECK(errors == 1);
  const Result dry = run_mpi(
      7, job(dir, "dry", "--set train.mode=sync --set cluster.evaluator=true --dry-run"), 60);
  CHECK(dry.code == 0);
  CHECK(dry.output.find("rank 1: evaluator") != std::string::npos);
  CHECK(dry.output.find("rank 6: worker 4") != std::string::npos);
  CHECK(dry.output.find("N = 4, b = 1") != std::string::npos);
  fs::remove_all(dir);
}
