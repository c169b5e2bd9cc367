// Config composition (config/include.hpp) and grid sweeps (config/sweep.hpp):
// what a file that includes others resolves to, the errors of a bad include,
// and the runs a grid expands into with their names.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <random>

#include "common/error.hpp"
#include "config/config.hpp"
#include "config/include.hpp"
#include "config/sweep.hpp"

namespace fs = std::filesystem;
namespace c = syncopt::config;

namespace {

// A fresh folder of config files, removed at scope exit.
class Folder {
 public:
  Folder() {
    std::random_device rd;
    m_dir = fs::temp_directory_path() / ("syncopt-compose-" + std::to_string(rd()));
    fs::create_directories(m_dir);
  }
  ~Folder() { fs::remove_all(m_dir); }
  std::string put(const std::string& name, const std::string& text) const {
    fs::create_directories((m_dir / name).parent_path());
    std::ofstream(m_dir / name) << text;
    return (m_dir / name).string();
  }
  fs::path path() const { return m_dir; }

 private:
  fs::path m_dir;
};

std::string load_error(const std::string& path) {
  try {
    (void)c::load(path, {});
  } catch (const syncopt::ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("include: the base's keys with the including file's on top", "[config][compose]") {
  Folder f;
  f.put("base/model.toml", "[model]\nname = \"mlp\"\nmlp_hidden = 64\n[optim]\nlr = 0.2\n");
  f.put("base.toml",
        "include = \"base/model.toml\"\n[train]\nbatch = 8\nsteps = 7\n[optim]\nlr = 0.3\n");
  f.put("other.toml", "[optim]\nlr = 0.4\nmomentum = 0.5\n");
  const std::string top =
      f.put("exp.toml", "include = [\"base.toml\", \"other.toml\"]\n[train]\nsteps = 9\n");
  const c::Config cfg = c::load(top, {"train.batch=4"});
  CHECK(cfg.model.name == c::ModelName::kMlp);  // two levels down
  CHECK(cfg.model.mlp_hidden == 64);
  CHECK(cfg.optim.lr == 0.4);  // the later include wins over the earlier
  CHECK(cfg.optim.momentum == 0.5);
  CHECK(cfg.train.steps == 9);  // the file itself over its includes
  CHECK(cfg.train.batch == 4);  // --set over everything
  // The resolved config names no include and loads back the same.
  const std::string resolved = c::to_toml(cfg);
  CHECK(resolved.find("include") == std::string::npos);
  CHECK(c::parse(resolved, "resolved", {}) == cfg);
  // What run.json records: every file, base first.
  const auto files = c::config_files(top);
  REQUIRE(files.size() == 4);
  CHECK(fs::path(files[0]).filename() == "model.toml");
  CHECK(fs::path(files[1]).filename() == "base.toml");
  CHECK(fs::path(files[2]).filename() == "other.toml");
  CHECK(fs::path(files[3]).filename() == "exp.toml");
}

TEST_CASE("include: errors name the file, the line and the chain", "[config][compose]") {
  Folder f;
  const std::string missing = f.put("a.toml", "# first line\ninclude = \"nope.toml\"\n");
  CHECK_THAT(load_error(missing), Catch::Contains("a.toml:2: included config file") &&
                                      Catch::Contains("nope.toml' not found"));

  f.put("x.toml", "include = \"y.toml\"\n");
  const std::string x = (f.path() / "x.toml").string();
  f.put("y.toml", "include = \"x.toml\"\n");
  CHECK_THAT(load_error(x), Catch::Contains("include cycle: ") && Catch::Contains("x.toml -> ") &&
                                Catch::Contains("y.toml -> "));

  const std::string bad = f.put("b.toml", "include = 3\n");
  CHECK_THAT(load_error(bad), Catch::Contains("b.toml:1: include: expected a file name"));

  // Lines keep their numbers: a bad key below the include is on line 4.
  f.put("ok.toml", "[train]\nbatch = 2\n");
  const std::string lines = f.put("c.toml", "include = \"ok.toml\"\n\n[train]\nbogus = 1\n");
  CHECK_THAT(load_error(lines), Catch::Contains("c.toml:4: unknown key train.bogus"));

  // In a section it is no include: an unknown key.
  const std::string inner = f.put("d.toml", "[train]\ninclude = \"ok.toml\"\n");
  CHECK_THAT(load_error(inner), Catch::Contains("unknown key train.include"));

  // A key twice in one file is still an error; across files it is an override.
  const std::string twice =
      f.put("e.toml", "include = \"ok.toml\"\n[train]\nbatch = 3\nbatch = 4\n");
  CHECK_THAT(load_error(twice), Catch::Contains("duplicate key train.batch"));
}

TEST_CASE("the paper's staleness configs are their base plus s", "[config][compose]") {
  const std::string dir = std::string(SYNCOPT_SOURCE_DIR) + "/configs/paper/";
  const c::Config base = c::load(dir + "staleness-base.toml", {});
  for (const int s : {5, 10, 20, 50}) {
    INFO(s);
    c::Config cfg = c::load(dir + "staleness-" + std::to_string(s) + ".toml", {});
    CHECK(cfg.train.simulated_staleness == s);
    CHECK(cfg.train.staleness_dist == c::StalenessDist::kGeometric);
    CHECK(cfg.run.name == "staleness-" + std::to_string(s));
    CHECK(cfg.optim.lr == 0.1);
    CHECK(cfg.data.augment);
    CHECK(cfg.train.epochs == 25.0);
    // Apart from the name and s, the base.
    cfg.run.name = base.run.name;
    cfg.train.simulated_staleness = base.train.simulated_staleness;
    cfg.train.staleness_dist = base.train.staleness_dist;
    CHECK(cfg == base);
  }
}

TEST_CASE("sweep axes split at commas outside brackets and quotes", "[config][sweep]") {
  const auto a = c::parse_axis("train.backups=0,1,2");
  CHECK(a.key == "train.backups");
  CHECK(a.values == std::vector<std::string>{"0", "1", "2"});
  const auto w = c::parse_axis("stragglers.workers=[0,1],[2]");
  CHECK(w.values == std::vector<std::string>{"[0,1]", "[2]"});
  CHECK(c::parse_axis("optim.name=\"sgd,x\",rmsprop").values.size() == 2);
  CHECK_THROWS_AS(c::parse_axis("backups=0,1"), syncopt::ConfigError);
  CHECK_THROWS_AS(c::parse_axis("train.backups"), syncopt::ConfigError);
  CHECK_THROWS_AS(c::parse_axis("train.backups=0,,1"), syncopt::ConfigError);
  CHECK_THROWS_AS(c::parse_axis("train.backups=0, 1"), syncopt::ConfigError);
}

TEST_CASE("a grid is every combination named by its values", "[config][sweep]") {
  const auto runs = c::expand(
      {c::parse_axis("train.backups=0,1"), c::parse_axis("optim.lr=0.01,0.02,0.05")}, "exp");
  REQUIRE(runs.size() == 6);
  CHECK(runs[0].name == "exp_backups=0_lr=0.01");
  CHECK(runs[0].overrides == std::vector<std::string>{"train.backups=0", "optim.lr=0.01"});
  CHECK(runs[5].name == "exp_backups=1_lr=0.05");
  CHECK(runs[3].overrides == std::vector<std::string>{"train.backups=1", "optim.lr=0.01"});
  // Two axes with the same key name are told apart by their sections; a
  // value a file system would not take becomes '-'.
  const auto clash = c::expand({c::parse_axis("sim.seed=1"), c::parse_axis("run.seed=2"),
                                c::parse_axis("stragglers.workers=[0,1]")},
                               "e");
  REQUIRE(clash.size() == 1);
  CHECK(clash[0].name == "e_sim.seed=1_run.seed=2_workers=-0-1-");
  // Every name is a valid run.name.
  for (const auto& r : clash) CHECK_NOTHROW(c::parse("", "x", {"run.name=" + r.name}));
}

TEST_CASE("a sweep never gives two runs one name", "[config][sweep]") {
  // A value twice, values that read alike in a run name, a key swept twice.
  CHECK_THROWS_WITH(c::expand({c::parse_axis("train.batch=8,8")}, "s"),
                    Catch::Contains("would name their runs alike"));
  CHECK_THROWS_WITH(c::expand({c::parse_axis("data.path=/x/y,/x-y")}, "s"),
                    Catch::Contains("would name their runs alike"));
  CHECK_THROWS_WITH(
      c::expand({c::parse_axis("train.batch=8"), c::parse_axis("train.batch=16")}, "s"),
      Catch::Contains("train.batch is given twice"));
  CHECK_THROWS_AS(c::expand({c::parse_axis("train.batch=8,8")}, "s"), syncopt::ConfigError);
  CHECK(c::expand({c::parse_axis("train.batch=8,16")}, "s").size() == 2);
}
