// Simulated staleness through the binary: the keys reach the local trainer,
// the records carry the injected staleness, `syncopt report` shows it, and
// the keys are refused outside local mode (exit 78).
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "harness.hpp"

using namespace syncopt_test;
namespace fs = std::filesystem;

TEST_CASE("train.simulated_staleness: records, report, local mode only", "[e2e][staleness]") {
  const auto dir = temp_dir("staleness");
  const std::string base = "train " + src("configs/smoke.toml") +
                           " --quiet --set run.dir=" + dir.string() + " --set train.steps=12";
  const Result r = run(base + " --set run.name=s3 --set train.simulated_staleness=3");
  REQUIRE(r.code == 0);
  const auto steps = read_jsonl(dir / "s3" / "steps.jsonl");
  REQUIRE(steps.size() == 12);
  for (const auto& rec : steps) {
    const auto t = rec["version"].get<std::int64_t>();
    CHECK(rec["grads"][0]["staleness"].get<std::int64_t>() == std::min<std::int64_t>(3, t));
    CHECK(rec["grads"][0]["version"].get<std::int64_t>() == t - std::min<std::int64_t>(3, t));
  }
  // Steps 4..12 ran 3 updates stale; the warm-up 0, 1, 2 once each.
  const Result report = run("report " + (dir / "s3").string());
  REQUIRE(report.code == 0);
  CHECK_THAT(report.output, Catch::Contains("mean 2.50  max 3") && Catch::Contains("0:1") &&
                                Catch::Contains("3:9"));

  // The same run without staleness ends elsewhere.
  REQUIRE(run(base + " --set run.name=s0").code == 0);
  CHECK(read_floats(dir / "s0" / "params.f32") != read_floats(dir / "s3" / "params.f32"));

  const Result bad = run(base +
                         " --set run.name=x --set train.mode=async "
                         "--set train.simulated_staleness=3");
  CHECK(bad.code == 78);
  CHECK_THAT(bad.output, Catch::Contains("train.simulated_staleness") && Catch::Contains("local"));
  fs::remove_all(dir);
}
