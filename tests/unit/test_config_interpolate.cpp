// Interpolation in configs (config/interpolate.hpp): ${section.key} and
// ${env:VAR} in files and --set, resolved after every override and before
// validation, typed like the key, written resolved by to_toml(); every
// problem said with where it was written. And the sweep's ranges
// (range(), a:b:step), its check of the swept keys and of every run, each
// problem once, and run names that interpolate swept keys.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "config/config.hpp"
#include "config/sweep.hpp"

namespace fs = std::filesystem;
namespace c = syncopt::config;
using Catch::Matchers::Contains;

namespace {

std::string error_of(const std::string& text, const std::vector<std::string>& overrides) {
  try {
    (void)c::parse(text, "exp.toml", overrides);
  } catch (const syncopt::ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

std::size_t count_of(const std::string& text, const std::string& part) {
  std::size_t n = 0;
  for (auto p = text.find(part); p != std::string::npos; p = text.find(part, p + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("interpolation: a reference takes the key's final value, typed like the key",
          "[config][interp]") {
  const auto cfg = c::parse(
      "[run]\nseed = 7\nname = \"ab-b${train.backups}-s${run.seed}\"\n"
      "[sim]\nseed = \"${run.seed}\"\n",
      "exp.toml",
      {"stragglers.seed=${run.seed}", "train.backups=2", "run.seed=3",
       "data.path=/d/${train.mode}/${optim.lr}"});
  CHECK(cfg.run.seed == 3);  // the last --set, whatever the order of writing
  CHECK(cfg.sim.seed == 3);
  CHECK(cfg.stragglers.seed == 3);
  CHECK(cfg.run.name == "ab-b2-s3");
  CHECK(cfg.data.path == "/d/local/0.05");  // an enum by name, a float as it reads back
  // config.toml holds the values, not the references.
  const std::string toml = c::to_toml(cfg);
  CHECK(toml.find("${") == std::string::npos);
  CHECK(c::parse(toml, "config.toml", {}) == cfg);
  // A chain resolves in the order it needs; a plain --set after a
  // reference replaces it.
  const auto chain = c::parse("", "x",
                              {"sim.seed=${stragglers.seed}", "stragglers.seed=${run.seed}",
                               "run.seed=11", "run.name=r${sim.seed}"});
  CHECK(chain.run.name == "r11");
  CHECK(c::parse("[sim]\nseed = \"${run.seed}\"\n", "x", {"sim.seed=5"}).sim.seed == 5);
  // A count-or-auto key reads as its word, never as a quoted TOML string.
  CHECK(c::parse("", "x",
                 {"train.backups=auto", "optim.scale_lr_by_n=true", "run.name=b${train.backups}"})
            .run.name == "bauto");
}

TEST_CASE("interpolation: env:VAR reads the environment, with a default when unset",
          "[config][interp]") {
  ::setenv("SYNCOPT_TEST_DATA_DIR", "/scratch/me", 1);
  ::unsetenv("SYNCOPT_TEST_UNSET");
  const auto cfg = c::parse("[data]\npath = \"${env:SYNCOPT_TEST_DATA_DIR}/fmnist\"\n", "x",
                            {"train.batch=${env:SYNCOPT_TEST_UNSET,48}"});
  CHECK(cfg.data.path == "/scratch/me/fmnist");
  CHECK(cfg.train.batch == 48);
  const std::string e = error_of("", {"data.path=${env:SYNCOPT_TEST_UNSET}"});
  CHECK_THAT(e, Contains("--set data.path=${env:SYNCOPT_TEST_UNSET}"));
  CHECK_THAT(e, Contains("the environment variable SYNCOPT_TEST_UNSET is not set"));
}

TEST_CASE("interpolation problems name where they were written, all at once", "[config][interp]") {
  const std::string e = error_of(
      "[run]\nname = \"x-${run.sed}\"\n[sim]\nseed = \"${stragglers.seed}\"\n"
      "[stragglers]\nseed = \"${sim.seed}\"\n",
      {"train.batch=${run.name}", "optim.lr=${optim.lr", "data.path=${env:SYNCOPT_NO_SUCH}"});
  CHECK_THAT(e, Contains("exp.toml:2: run.name = \"x-${run.sed}\": ${run.sed}: no key run.sed"));
  CHECK_THAT(e, Contains("run.seed"));  // the nearest key
  CHECK_THAT(e, Contains("go round in a circle"));
  CHECK_THAT(e, Contains("--set optim.lr=${optim.lr: optim.lr = \"${optim.lr\": '${' without"));
  CHECK_THAT(e, Contains("SYNCOPT_NO_SUCH is not set"));
  // train.batch refers to run.name, which failed: said once, at run.name.
  CHECK(count_of(e, "run.sed") == 3);  // in the value twice, in "no key run.sed" once
  CHECK(count_of(e, "train.batch") == 0);
  // A resolved value the key does not take: its type error, with what it resolved to.
  const std::string t = error_of("", {"train.batch=${run.name}"});
  CHECK_THAT(t, Contains("--set train.batch=${run.name}"));
  CHECK_THAT(t, Contains("resolved to \""));
  CHECK_THAT(t, Contains("expected integer"));
  // Validation sees the resolved value, with its origin.
  CHECK_THAT(error_of("", {"train.batch=${train.backups}", "train.backups=0"}),
             Contains("train.batch"));
}

TEST_CASE("sweep ranges: range() without its end, a:b:step with it", "[config][sweep]") {
  CHECK(c::parse_axis("optim.lr=0.01:0.05:0.01").values ==
        std::vector<std::string>{"0.01", "0.02", "0.03", "0.04", "0.05"});
  CHECK(c::parse_axis("train.backups=range(0,3)").values ==
        std::vector<std::string>{"0", "1", "2"});
  CHECK(c::parse_axis("train.backups=0:5:2,auto").values ==
        std::vector<std::string>{"0", "2", "4", "auto"});
  CHECK(c::parse_axis("run.seed=1:3").values == std::vector<std::string>{"1", "2", "3"});
  CHECK(c::parse_axis("run.seed=range(5,0,-2),9").values ==
        std::vector<std::string>{"5", "3", "1", "9"});
  CHECK(c::parse_axis("optim.lr=range(0.1,0.4,0.1)").values ==
        std::vector<std::string>{"0.1", "0.2", "0.3"});
  CHECK(c::parse_axis("data.path=/a:b,/c").values == std::vector<std::string>{"/a:b", "/c"});
  CHECK_THROWS_WITH(c::parse_axis("run.seed=1:5:0"), Contains("a step of 0"));
  CHECK_THROWS_WITH(c::parse_axis("run.seed=5:1:1"), Contains("no values"));
  CHECK_THROWS_WITH(c::parse_axis("run.seed=range(2,2)"), Contains("range() excludes the stop"));
  CHECK_THROWS_WITH(c::parse_axis("run.seed=0:20000"), Contains("more than 10000 values"));
  CHECK_THROWS_WITH(c::parse_axis("run.seed=range(a,3)"), Contains("range(start,stop)"));
}

TEST_CASE("a sweep's problems are said once, with the runs they concern", "[config][sweep]") {
  std::random_device rd;
  const fs::path dir = fs::temp_directory_path() / ("syncopt-interp-" + std::to_string(rd()));
  fs::create_directories(dir);
  const std::string cfg = (dir / "exp.toml").string();
  std::ofstream(cfg) << "[run]\nname = \"exp\"\n[data]\nname = \"synthetic\"\n";

  CHECK_THROWS_WITH(
      c::check_axes({c::parse_axis("train.backup=0,1"), c::parse_axis("optim.lr=0.1")}),
      Contains("-m train.backup: unknown key train.backup") && Contains("train.backups"));
  CHECK_NOTHROW(c::check_axes({c::parse_axis("train.backups=0,1")}));

  const auto axes =
      std::vector{c::parse_axis("optim.lr=-1,0.1"), c::parse_axis("train.batch=8,16")};
  try {
    (void)c::check_runs(cfg, {}, c::expand(axes, "exp"));
    FAIL("no error");
  } catch (const syncopt::ConfigError& e) {
    const std::string w = e.what();
    INFO(w);
    CHECK_THAT(w, Contains("(2 of 4 runs)"));
    CHECK(count_of(w, "--set optim.lr=-1") == 1);
    CHECK_THAT(w, Contains("in 2 runs: exp_lr=-1_batch=8, exp_lr=-1_batch=16"));
  }
  try {
    (void)c::check_runs(cfg, {"train.steps=${env:SYNCOPT_NO_SUCH}"}, c::expand(axes, "exp"));
    FAIL("no error");
  } catch (const syncopt::ConfigError& e) {
    const std::string w = e.what();
    INFO(w);
    CHECK(count_of(w, "SYNCOPT_NO_SUCH is not set") == 1);
    CHECK_THAT(w, Contains("in every run"));
  }
  // run.name that refers to swept keys names each run; names must differ.
  const auto named = c::check_runs(
      cfg, {"run.name=ab-lr${optim.lr}-b${train.batch}"},
      c::expand({c::parse_axis("optim.lr=0.1,0.2"), c::parse_axis("train.batch=8,16")}, "exp"));
  REQUIRE(named.size() == 4);
  CHECK(named[0].name == "ab-lr0.1-b8");
  CHECK(named[3].name == "ab-lr0.2-b16");
  CHECK_THROWS_WITH(
      c::check_runs(
          cfg, {"run.name=ab-b${train.batch}"},
          c::expand({c::parse_axis("optim.lr=0.1,0.2"), c::parse_axis("train.batch=8,16")}, "exp")),
      Contains("resolves to 'ab-b8' for two runs"));
  // Without a reference the grid names stay.
  CHECK(c::check_runs(cfg, {}, c::expand({c::parse_axis("train.batch=8,16")}, "exp"))[1].name ==
        "exp_batch=16");
  fs::remove_all(dir);
}
