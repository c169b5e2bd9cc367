// What a researcher meets first: a mistyped subcommand, --set before the
// config, a distributed config started without MPI, a run's run.json, a
// repeat from a run's own config.toml, a run that has no summary.json,
// the CSV export, and results that were never evaluated.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <regex>

#include "../common/skip.hpp"
#include "harness.hpp"

using namespace syncopt_test;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

std::string smoke(const fs::path& dir, const std::string& name) {
  return "train " + src("configs/smoke.toml") + " --quiet --set run.dir=" + dir.string() +
         " --set run.name=" + name + " --set train.steps=4 --set model.name=mlp";
}

std::size_t lines_of(const fs::path& p) {
  const std::string text = read_text(p);
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

}  // namespace

TEST_CASE("a mistyped subcommand gets the nearest one and the list", "[e2e][cli]") {
  const Result r = run("trian configs/smoke.toml");
  CHECK(r.code == 64);
  CHECK_THAT(r.output, Catch::Contains("unknown subcommand 'trian'") &&
                           Catch::Contains("did you mean 'train'?"));
  for (const char* sub :
       {"train", "report", "export", "checkpoints", "simulate", "plan", "sweep", "keys"}) {
    INFO(sub);
    CHECK(r.output.find("\n  " + std::string(sub) + " ") != std::string::npos);
  }
  const Result none = run("");
  CHECK(none.code == 64);
  CHECK_THAT(none.output, Catch::Contains("subcommands:") && Catch::Contains("report"));
  // Nothing close: no guess, still the list.
  const Result far = run("frobnicate");
  CHECK(far.code == 64);
  CHECK(far.output.find("did you mean") == std::string::npos);
  CHECK_THAT(far.output, Catch::Contains("subcommands:"));
}

TEST_CASE("each --set takes one value wherever it stands", "[e2e][cli]") {
  const auto dir = temp_dir("set");
  const Result r = run("train --set train.steps=3 " + src("configs/smoke.toml") +
                       " --set run.dir=" + dir.string() + " --quiet --set=model.name=mlp");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const std::string cfg = read_text(dir / "smoke" / "config.toml");
  CHECK_THAT(cfg, Catch::Contains("steps = 3") && Catch::Contains("name = \"mlp\""));
  CHECK(read_jsonl(dir / "smoke" / "steps.jsonl").size() == 3);
  fs::remove_all(dir);
}

TEST_CASE("a distributed config without MPI is refused with the mpirun line", "[e2e][cli]") {
  const Result r = run("train " + src("configs/fmnist-sync.toml"));
  CHECK(r.code == 64);
  CHECK_THAT(r.output, Catch::Contains("train.mode = \"sync\" needs several MPI ranks") &&
                           Catch::Contains("mpirun -np 7 ") &&
                           Catch::Contains("configs/fmnist-sync.toml") &&
                           Catch::Contains("--set train.mode=local"));
  // --dry-run (what run.sh and train.sbatch validate with) still works, and says so.
  const Result dry = run("train " + src("configs/fmnist-sync.toml") + " --dry-run");
  CHECK(dry.code == 0);
  CHECK_THAT(dry.output, Catch::Contains("NOTE: train.mode = \"sync\" needs MPI"));
  CHECK(dry.output.find("--dry-run  ") == std::string::npos);  // not in the line to run
}

TEST_CASE("run.json says how a run was made and its config.toml repeats it", "[e2e][runjson]") {
  const auto dir = temp_dir("runjson");
  const Result first = run(smoke(dir, "a") + " --set optim.lr=0.02");
  INFO(first.output);
  REQUIRE(first.code == 0);
  const json doc = json::parse(read_text(dir / "a" / "run.json"));
  CHECK(doc["name"] == "a");
  REQUIRE(doc["launches"].size() == 1);
  const json& l = doc["launches"][0];
  CHECK(l["argv"][0].get<std::string>().ends_with("syncopt"));
  CHECK(l["argv"][1] == "train");
  CHECK(l["config"] == src("configs/smoke.toml"));
  REQUIRE(l["config_files"].size() == 1);
  CHECK(l["config_files"][0]["path"] == src("configs/smoke.toml"));
  CHECK(l["config_files"][0]["text"] == read_text(src("configs/smoke.toml")));
  CHECK(l["overrides"].size() == 5);
  CHECK(l["overrides"][4] == "optim.lr=0.02");
  const std::string commit = l["syncopt"]["git_commit"];
  CHECK((commit == "unknown" || std::regex_match(commit, std::regex("[0-9a-f]{40}"))));
  CHECK(l["syncopt"]["version"].is_string());
  CHECK(std::regex_match(l["start_utc"].get<std::string>(),
                         std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")));
  CHECK(l["end_utc"].is_string());
  CHECK(l["status"] == "completed");
  CHECK(l["exit_code"] == 0);
  CHECK(l["launcher"] == "none");
  CHECK(l["layout"]["mode"] == "local");
  CHECK(l["layout"]["world"] == 1);
  REQUIRE(l["ranks"].size() == 1);
  CHECK(l["ranks"][0]["host"] == l["host"]);
  CHECK(l["ranks"][0]["pid"] == l["pid"]);

  // Resumed (here: a completed run, continued to its end again): a second
  // launch, the first kept as it was.
  const Result resumed = run(smoke(dir, "a") + " --set optim.lr=0.02 --set run.resume=true");
  INFO(resumed.output);
  REQUIRE(resumed.code == 0);
  const json doc2 = json::parse(read_text(dir / "a" / "run.json"));
  REQUIRE(doc2["launches"].size() == 2);
  CHECK(doc2["launches"][0] == l);
  CHECK(doc2["launches"][1]["resumed"] == true);
  CHECK(doc2["launches"][1]["status"] == "completed");

  // Repeating from the run's own config.toml: a new name, the old run untouched.
  const std::string before = read_text(dir / "a" / "steps.jsonl");
  const Result again = run("train " + (dir / "a" / "config.toml").string() + " --quiet");
  INFO(again.output);
  REQUIRE(again.code == 0);
  CHECK_THAT(again.output, Catch::Contains("repeating the run") && Catch::Contains("a-2"));
  CHECK(read_text(dir / "a" / "steps.jsonl") == before);
  CHECK(read_jsonl(dir / "a-2" / "steps.jsonl").size() == 4);
  const json again_doc = json::parse(read_text(dir / "a-2" / "run.json"));
  CHECK(again_doc["launches"][0]["repeat_of"] == (dir / "a").string());
  REQUIRE(run("train " + (dir / "a" / "config.toml").string() + " --quiet").code == 0);
  CHECK(fs::exists(dir / "a-3"));
  // Any other existing name is still refused (73), never silently renamed.
  CHECK(run(smoke(dir, "a")).code == 73);
  fs::remove_all(dir);
}

TEST_CASE("report and plot.py and export read a run without summary.json", "[e2e][partial]") {
  const auto dir = temp_dir("partial");
  REQUIRE(run(smoke(dir, "k") + " --set eval.every_steps=2").code == 0);
  // The run's process is gone; without its summary it looks killed.
  fs::remove(dir / "k" / "summary.json");
  const Result r = run("report " + (dir / "k").string());
  INFO(r.output);
  CHECK(r.code == 0);
  CHECK_THAT(r.output, Catch::Contains("INCOMPLETE: killed: no summary.json") &&
                           Catch::Contains("is gone without writing one") &&
                           Catch::Contains("resume from its checkpoint at step 4") &&
                           Catch::Contains("updates 4 in") &&
                           Catch::Contains("final test accuracy: not evaluated"));
  // A torn last record (killed mid-write) is left out, not an error.
  {
    std::ofstream out(dir / "k" / "steps.jsonl", std::ios::app);
    out << "{\"step\": 5, \"shard\": 0, \"t_st";
  }
  const Result torn = run("report " + (dir / "k").string());
  CHECK(torn.code == 0);
  CHECK_THAT(torn.output, Catch::Contains("updates 4 in"));

  const Result plot =
      run_command("python3 " + src("scripts/plot.py") + " " + (dir / "k").string() + " --dpi 30");
  INFO(plot.output);
  CHECK(plot.code == 0);
  CHECK_THAT(plot.output, Catch::Contains("INCOMPLETE (killed)"));

  const Result ex = run("export " + (dir / "k").string() + " --csv");
  INFO(ex.output);
  REQUIRE(ex.code == 0);
  CHECK(lines_of(dir / "k" / "csv" / "steps.csv") == 1 + 4);
  CHECK(lines_of(dir / "k" / "csv" / "grads.csv") == 1 + 4);
  CHECK(read_text(dir / "k" / "csv" / "steps.csv")
            .starts_with("step,shard,version,t_start,t_apply,lr,loss,used,grads,dropped"));
  CHECK(read_text(dir / "k" / "csv" / "grads.csv")
            .starts_with("step,shard,worker,arrival_s,version,accepted,staleness,compute_s"));
  const auto evals = read_jsonl(dir / "k" / "eval.jsonl");
  CHECK(lines_of(dir / "k" / "csv" / "eval.csv") == 1 + evals.size());
  CHECK(run("export " + (dir / "nope").string()).code == 66);
  CHECK(run("report " + (dir / "nope").string()).code == 66);
  fs::remove_all(dir);
}

TEST_CASE("a run that was not evaluated says so and never shows 0.00 %", "[e2e][partial]") {
  const auto dir = temp_dir("noeval");
  const Result sim =
      run("simulate " + src("configs/smoke.toml") + " --quiet --set run.dir=" + dir.string() +
          " --set run.name=s --set train.mode=sync" + " --set train.steps=20 --set sim.workers=4");
  INFO(sim.output);
  REQUIRE(sim.code == 0);
  const json s = json::parse(read_text(dir / "s" / "summary.json"));
  CHECK(s["test_acc"].is_null());
  CHECK(s["test_acc_ema"].is_null());
  const Result r = run("report " + (dir / "s").string());
  CHECK(r.code == 0);
  CHECK_THAT(r.output, Catch::Contains("final test accuracy: not evaluated (a simulation"));
  CHECK(r.output.find("0.00%") == std::string::npos);
  // A simulation has a run.json too.
  const json doc = json::parse(read_text(dir / "s" / "run.json"));
  CHECK(doc["launches"][0]["argv"][1] == "simulate");
  CHECK(doc["launches"][0]["status"] == "completed");
  fs::remove_all(dir);
}

TEST_CASE("syncopt sweep writes a grid that sweep.sbatch runs line by line", "[e2e][sweep]") {
  const auto dir = temp_dir("sweep");
  const std::string out = (dir / "grid.txt").string();
  const Result r =
      run("sweep " + src("configs/smoke.toml") +
          " -m train.batch=8,16 -m optim.lr=0.01,0.02,0.05 --set train.steps=3 --out " + out);
  INFO(r.output);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.output, Catch::Contains("6 runs written") && Catch::Contains("--array=0-5"));
  // sweep.sbatch outside SLURM lists the runs and the range to submit.
  const Result list = run_command("SYNCOPT_BIN=" + std::string(SYNCOPT_EXE) + " bash " +
                                  src("scripts/slurm/sweep.sbatch") + " " + out);
  INFO(list.output);
  CHECK(list.code == 0);
  CHECK_THAT(list.output, Catch::Contains("5: ") && Catch::Contains("sbatch --array=0-5 ") &&
                              Catch::Contains("run.name=smoke_batch=16_lr=0.05"));
  // Line 4 as an array task would run it: its run is named by its values.
  std::ifstream in(out);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) {
    if (!l.empty() && l[0] != '#') lines.push_back(l);
  }
  REQUIRE(lines.size() == 6);
  const Result one = run("train " + lines[4] + " --quiet --set run.dir=" + dir.string());
  INFO(one.output);
  REQUIRE(one.code == 0);
  const std::string cfg = read_text(dir / "smoke_batch=16_lr=0.02" / "config.toml");
  CHECK_THAT(cfg, Catch::Contains("batch = 16") && Catch::Contains("lr = 0.02"));
  // A grid with an invalid combination is refused whole, naming it.
  const Result bad = run("sweep " + src("configs/smoke.toml") + " -m train.batch=8,0");
  CHECK(bad.code == 78);
  CHECK_THAT(bad.output, Catch::Contains("smoke_batch=0") && Catch::Contains("train.batch"));
  fs::remove_all(dir);
}

TEST_CASE("run.json records every file of a config that includes others", "[e2e][sweep]") {
  const auto dir = temp_dir("include");
  write_text(dir / "base.toml", read_text(src("configs/smoke.toml")));
  write_text(dir / "exp.toml", "include = \"base.toml\"\n[train]\nsteps = 3\n");
  const Result r = run("train " + (dir / "exp.toml").string() + " --quiet --set run.dir=" +
                       (dir / "runs").string() + " --set model.name=mlp");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const json l = json::parse(read_text(dir / "runs" / "smoke" / "run.json"))["launches"][0];
  REQUIRE(l["config_files"].size() == 2);
  CHECK(l["config_files"][0]["path"] == (dir / "base.toml").string());
  CHECK(l["config_files"][1]["path"] == (dir / "exp.toml").string());
  CHECK(l["config_files"][1]["text"] == read_text(dir / "exp.toml"));
  CHECK(read_jsonl(dir / "runs" / "smoke" / "steps.jsonl").size() == 3);
  fs::remove_all(dir);
}

TEST_CASE("a run resumes in the other precision, checkpoints hold FP32", "[e2e][resume][bf16]") {
  // `syncopt --version` names the ISA oneDNN dispatches to: bf16 needs AVX-512.
  if (skip_without_cpu_bf16(run("--version").output.find("cpu isa avx512") != std::string::npos))
    return;
  const auto dir = temp_dir("resume-precision");
  const std::string base = "train " + src("configs/smoke.toml") +
                           " --quiet --set run.dir=" + dir.string() +
                           " --set model.name=cnn --set train.batch=16 ";
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"fp32", "bf16"},
                                 std::pair<std::string, std::string>{"bf16", "fp32"}}) {
    INFO(from << " -> " << to);
    const std::string name = from + "-" + to;
    const Result first = run(base + "--set run.name=" + name + " --set train.steps=6 " +
                             "--set compute.precision=" + from);
    INFO(first.output);
    REQUIRE(first.code == 0);
    const Result resumed = run(base + "--set run.name=" + name + " --set train.steps=10 " +
                               "--set compute.precision=" + to + " --set run.resume=true");
    INFO(resumed.output);
    REQUIRE(resumed.code == 0);
    const auto steps = read_jsonl(dir / name / "steps.jsonl");
    REQUIRE(steps.size() == 10);
    CHECK(steps.back()["step"] == 10);
    const json doc = json::parse(read_text(dir / name / "run.json"));
    REQUIRE(doc["launches"].size() == 2);
    const auto& changed = doc["launches"][1]["changed"];
    INFO(changed.dump());
    CHECK(changed.dump().find("compute.precision") != std::string::npos);
    // The resumed steps trained on from the checkpoint (a loss near the
    // last one, not a fresh start's).
    const double before = steps[5]["loss"].get<double>();
    const double after = steps[6]["loss"].get<double>();
    CHECK(std::abs(after - before) < 0.5 * before);
  }
  fs::remove_all(dir);
}
