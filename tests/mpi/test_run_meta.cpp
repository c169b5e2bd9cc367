// run.json of a distributed run as mpirun starts it: every rank with its
// role, host and pid, the launcher, the layout, and the end (a resumed run
// adding a launch is checked in tests/e2e/test_researcher.cpp). TensorBoard's
// view of the same is tests/tensorboard.
#include <catch2/catch.hpp>
#include <set>

#include "../e2e/harness.hpp"

using namespace syncopt_test;
namespace fs = std::filesystem;
using nlohmann::json;

TEST_CASE("run.json of a run under mpirun names every rank and the launcher", "[mpi][runjson]") {
  const auto dir = temp_dir("runjson-mpi");
  const std::string args = "train " + src("configs/smoke.toml") +
                           " --quiet --set run.dir=" + dir.string() +
                           " --set run.name=m --set model.name=mlp --set train.mode=sync"
                           " --set train.backups=1 --set cluster.evaluator=true"
                           " --set train.steps=30";
  const Result r = run_mpi(5, args);
  INFO(r.output);
  REQUIRE(r.code == 0);
  const json doc = json::parse(read_text(dir / "m" / "run.json"));
  REQUIRE(doc["launches"].size() == 1);
  const json& l = doc["launches"][0];
  CHECK(l["launcher"] == "mpirun");
  CHECK(l["status"] == "completed");
  CHECK(l["layout"]["mode"] == "sync");
  CHECK(l["layout"]["world"] == 5);
  CHECK(l["layout"]["shards"] == 1);
  CHECK(l["layout"]["evaluator_rank"] == 1);
  CHECK(l["layout"]["workers"] == 3);
  CHECK(l["layout"]["N"] == 2);
  CHECK(l["layout"]["b"] == 1);
  REQUIRE(l["ranks"].size() == 5);
  std::set<int> pids;
  const char* roles[] = {"ps0", "eval", "w0", "w1", "w2"};
  for (int i = 0; i < 5; ++i) {
    INFO(i);
    CHECK(l["ranks"][i]["rank"] == i);
    CHECK(l["ranks"][i]["role"] == roles[i]);
    CHECK(l["ranks"][i]["host"].get<std::string>() == l["host"].get<std::string>());
    pids.insert(l["ranks"][i]["pid"].get<int>());
  }
  CHECK(pids.size() == 5);
  CHECK(l["ranks"][0]["pid"] == l["pid"]);

  fs::remove_all(dir);
}
