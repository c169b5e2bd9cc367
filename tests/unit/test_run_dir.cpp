// The run directory as a resource of one job (rundir/lock.hpp,
// rundir/open.hpp, rundir/meta.hpp), without MPI: the lock and what a
// refused second start says; which keys a resume may change (extending a
// run) and which make it another experiment; one message for a resume with
// another number of ranks; a run resumed where its config.toml is; a moved
// run keeps its identity, a copied one gets its own.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/atomic_file.hpp"
#include "common/error.hpp"
#include "config/config.hpp"
#include "rundir/lock.hpp"
#include "rundir/meta.hpp"
#include "rundir/open.hpp"

namespace fs = std::filesystem;
using namespace syncopt;
using namespace syncopt::rundir;

namespace {

class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    m_path = fs::temp_directory_path() / ("syncopt_test_rundir_" + std::to_string(::getpid()) +
                                          "_" + std::to_string(counter++));
    fs::remove_all(m_path);
    fs::create_directories(m_path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(m_path, ec);
  }
  const fs::path& path() const { return m_path; }

 private:
  fs::path m_path;
};

config::Config config_in(const fs::path& dir, const std::string& name) {
  config::Config c;
  c.run.dir = dir.string();
  c.run.name = name;
  c.data.name = config::DataSet::kSynthetic;
  c.train.steps = 100;
  return c;
}

LockHolder holder(const std::string& launch) {
  LockHolder h = this_process(launch);
  h.pid = 4242;  // another process, as far as the message goes
  h.job = "77";
  return h;
}

// A run directory as a finished launch leaves it: config.toml and run.json.
fs::path make_run(const config::Config& c, int world = 4) {
  auto opened = open_run_dir(c, this_process("first"));
  layout::Roles roles;
  roles.world = world;
  roles.workers = world;
  RunJournal journal(opened.dir, c.run.name, {}, {{}, roles}, false);
  journal.finish(Outcome{});
  return opened.dir;
}

}  // namespace

TEST_CASE("run lock: one holder, a second is refused naming it, released at the end", "[run_dir]") {
  TempDir tmp;
  {
    auto first = RunLock::try_acquire(tmp.path(), holder("launch-a"));
    REQUIRE(first);
    CHECK(first->held());
    LockHolder who;
    CHECK_FALSE(RunLock::try_acquire(tmp.path(), holder("launch-b"), &who));
    CHECK(who.launch_id == "launch-a");
    CHECK(who.job == "77");
    CHECK(RunLock::held_by_other(tmp.path()));
    try {
      (void)RunLock::acquire(tmp.path(), holder("launch-b"), "resume");
      FAIL("a second holder");
    } catch (const OutputError& e) {
      CHECK(e.code() == ExitCode::kCantCreate);
      const std::string msg = e.what();
      CHECK(msg.find("pid 4242") != std::string::npos);
      CHECK(msg.find("SLURM job 77") != std::string::npos);
      CHECK(msg.find("launch-a") != std::string::npos);
    }
  }
  // The holder's descriptor is closed (its process ended): the lock is free.
  CHECK_FALSE(RunLock::held_by_other(tmp.path()));
  CHECK(RunLock::try_acquire(tmp.path(), holder("launch-c")));
}

TEST_CASE("resume: the length of training may change, not what a step computes", "[run_dir]") {
  TempDir tmp;
  const auto c = config_in(tmp.path(), "r");
  const fs::path dir = make_run(c);
  auto more = c;
  more.run.resume = true;
  more.train.steps = 250;
  more.optim.anneal_epochs = 1.0;
  const auto changed = check_resume(more, dir, 4);
  REQUIRE(changed.size() == 2);
  CHECK(changed[0].find("optim.anneal_epochs") != std::string::npos);
  CHECK(changed[1] == "train.steps: 100 -> 250");
  auto other = more;
  other.optim.lr = 0.1;
  other.train.batch = 64;
  try {
    check_resume(other, dir, 4);
    FAIL("another experiment was resumed");
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("optim.lr: 0.05 in the run, 0.1 now") != std::string::npos);
    CHECK(msg.find("train.batch: 32 in the run, 64 now") != std::string::npos);
    CHECK(msg.find("train.steps:") == std::string::npos);  // allowed, so not listed
  }
}

TEST_CASE("resume: another number of ranks is one message saying what to do", "[run_dir]") {
  TempDir tmp;
  const auto c = config_in(tmp.path(), "w");
  const fs::path dir = make_run(c, 5);
  auto again = c;
  again.run.resume = true;
  CHECK(check_resume(again, dir, 5).empty());
  // This launch is recorded before the check (so that a refusal is too):
  // its own entry, of 4 ranks, is not the run's layout.
  layout::Roles four;
  four.world = 4;
  four.workers = 4;
  Invocation now;
  now.launch_id = "now";
  RunJournal journal(dir, c.run.name, now, {{}, four}, true);
  try {
    check_resume(again, dir, 4, "now");
    FAIL("a resume with fewer ranks was accepted");
  } catch (const ConfigError& e) {
    const std::string msg = e.what();
    CHECK(msg.find("with 4 ranks") != std::string::npos);
    CHECK(msg.find("launched with 5 ranks") != std::string::npos);
    CHECK(msg.find("mpirun -np 5") != std::string::npos);
    CHECK(msg.find("--set run.name=w-np4") != std::string::npos);
  }
}

TEST_CASE("resume in place: a run directory's own config.toml resumes that directory",
          "[run_dir]") {
  TempDir tmp;
  const auto c = config_in(tmp.path() / "old-place", "r");
  const fs::path dir = make_run(c);
  fs::rename(dir, tmp.path() / "moved");
  auto cfg = c;
  cfg.run.resume = true;
  REQUIRE(resume_in_place(cfg, tmp.path() / "moved" / "config.toml", {}));
  CHECK(fs::equivalent(fs::path(cfg.run.dir) / cfg.run.name, tmp.path() / "moved"));
  // Where it is is not part of the experiment.
  CHECK(check_resume(cfg, tmp.path() / "moved", 4).empty());
  // An explicit run.name wins; a new run never moves.
  auto named = c;
  named.run.resume = true;
  CHECK_FALSE(resume_in_place(named, tmp.path() / "moved" / "config.toml", {"run.name=x"}));
  auto fresh = c;
  CHECK_FALSE(resume_in_place(fresh, tmp.path() / "moved" / "config.toml", {}));
}

TEST_CASE("run identity: a moved run keeps its id, a copy gets its own", "[run_dir]") {
  TempDir tmp;
  const auto c = config_in(tmp.path(), "orig");
  const fs::path dir = make_run(c);
  const auto id = [](const fs::path& d) {
    return nlohmann::json::parse(read_file_bytes(d / "run.json"))["run_id"].get<std::string>();
  };
  const std::string original = id(dir);
  REQUIRE(original.size() == 32);
  // Copied: the original is still there with the same run.
  fs::copy(dir, tmp.path() / "copy", fs::copy_options::recursive);
  { RunJournal j(tmp.path() / "copy", "copy", {}, {{}, {}}, true); }
  CHECK(id(tmp.path() / "copy") != original);
  CHECK(id(dir) == original);
  const auto copy_doc = nlohmann::json::parse(read_file_bytes(tmp.path() / "copy" / "run.json"));
  CHECK(copy_doc["launches"].back()["copied_from"]["run_id"] == original);
  // Moved: nothing is left where it was.
  fs::rename(dir, tmp.path() / "moved");
  { RunJournal j(tmp.path() / "moved", "moved", {}, {{}, {}}, true); }
  CHECK(id(tmp.path() / "moved") == original);
  const auto moved_doc = nlohmann::json::parse(read_file_bytes(tmp.path() / "moved" / "run.json"));
  CHECK(moved_doc["launches"].back().contains("moved_from"));
}
