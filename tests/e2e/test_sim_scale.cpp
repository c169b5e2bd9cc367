// `syncopt simulate` at a thousand workers: the records go to steps.jsonl as
// they are made and the summary is computed on the way (metrics::Analyzer),
// so memory does not grow with the records. The README's 1000 workers x
// 10,000 steps on configs/sim-k100.toml (10 shards) once held every record
// of every shard and was killed at 24 GB; here 300 steps of it must stay
// within 150 MB of peak RSS above what the binary takes to print its version
// (a build linked with CUDA maps ~200 MB of libraries before main(); the
// records held in memory took ~1 GB at 300 steps), and the three
// sim.records choices write what they say.
#include <sys/resource.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>

#include "harness.hpp"

using namespace syncopt_test;
namespace fs = std::filesystem;

namespace {

// Peak resident set of the largest child process waited for so far, in MB.
double children_peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_CHILDREN, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // Linux: KB
}

std::size_t lines_of(const fs::path& p) {
  std::size_t n = 0;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);) n += line.empty() ? 0 : 1;
  return n;
}

}  // namespace

TEST_CASE("simulate: 1000 workers and 10 shards in bounded memory, records streamed",
          "[e2e][sim][scale]") {
  const auto dir = temp_dir("sim-scale");
  // RUSAGE_CHILDREN keeps the largest child's peak: the bare binary first.
  REQUIRE(run("--version").code == 0);
  const double base = children_peak_rss_mb();
  const std::string common =
      "simulate " + src("configs/sim-k100.toml") +
      " -q --set sim.workers=1000 --set train.steps=300 --set run.dir=" + dir.string();
  const Result r = run(common + " --set run.name=shard0");
  INFO(r.output);
  REQUIRE(r.code == 0);
  const double peak = children_peak_rss_mb();
  std::printf("1000 workers x 300 steps, 10 shards: peak RSS %.0f MB (the bare binary %.0f MB)\n",
              peak, base);
  std::fflush(stdout);
  CHECK(peak - base < 150.0);
  // shard 0's records, one per update, each with every gradient of its step.
  CHECK(lines_of(dir / "shard0" / "steps.jsonl") == 300);
  const auto summary = nlohmann::json::parse(read_text(dir / "shard0" / "summary.json"));
  CHECK(summary["steps"] == 300);
  CHECK(summary["sim"]["records"] == "shard0");
  CHECK(summary["cross_shard_disagreements"].is_null());  // unknown from shard 0 alone
  long long accepted = 0;
  for (const auto& a : summary["accepted_per_worker"]) accepted += a.get<long long>();
  CHECK(accepted == 300LL * 996);

  // Every shard's records, as a real run writes them: shard 0's first.
  const Result all = run(common + " --set run.name=all --set sim.records=all");
  INFO(all.output);
  REQUIRE(all.code == 0);
  CHECK(lines_of(dir / "all" / "steps.jsonl") == 3000);
  CHECK(!fs::exists(dir / "all" / "steps.others.jsonl.tmp"));
  const auto all_summary = nlohmann::json::parse(read_text(dir / "all" / "summary.json"));
  CHECK(all_summary["cross_shard_disagreements"].is_number());
  // The same simulation: shard 0's numbers do not depend on what is written.
  CHECK(all_summary["time_to_kth_mean_s"] == summary["time_to_kth_mean_s"]);
  CHECK(all_summary["drops_per_worker"] == summary["drops_per_worker"]);

  // None: the summary alone, which report reads.
  const Result none = run(common + " --set run.name=none --set sim.records=none");
  INFO(none.output);
  REQUIRE(none.code == 0);
  CHECK(!fs::exists(dir / "none" / "steps.jsonl"));
  const Result rep = run("report " + (dir / "none").string());
  INFO(rep.output);
  CHECK(rep.code == 0);
  CHECK(rep.output.find("updates 300") != std::string::npos);
  fs::remove_all(dir);
}
