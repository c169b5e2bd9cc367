// Tests of metrics::Progress's choice between the live line and periodic log
// lines (run.progress), from the facts it reads off the process: its own
// stderr, and under Open MPI the launcher's stderr (a rank's stderr is a pipe
// to mpirun even when the user's terminal is mpirun's).
#include <catch2/catch.hpp>
#include <string>

#include "common/error.hpp"
#include "config/config.hpp"
#include "metrics/records.hpp"

namespace m = syncopt::metrics;

namespace {

m::TerminalFacts facts(bool tty, std::string parent, std::string parent_stderr) {
  m::TerminalFacts f;
  f.stderr_tty = tty;
  f.parent_comm = std::move(parent);
  f.parent_stderr = std::move(parent_stderr);
  return f;
}

}  // namespace

TEST_CASE("run.progress names parse at the key table -- others are config errors", "[progress]") {
  using syncopt::config::parse;
  CHECK(parse("[run]\nprogress = \"auto\"\n", "p.toml", {}).run.progress ==
        m::ProgressOutput::kAuto);
  CHECK(parse("", "p.toml", {"run.progress=live"}).run.progress == m::ProgressOutput::kLive);
  CHECK(parse("", "p.toml", {"run.progress=lines"}).run.progress == m::ProgressOutput::kLines);
  CHECK_THROWS_AS(parse("", "p.toml", {"run.progress=tty"}), syncopt::ConfigError);
}

TEST_CASE("auto: live on a terminal, including mpirun's, lines elsewhere", "[progress]") {
  const auto a = m::ProgressOutput::kAuto;
  // A local run at a terminal, or under `srun --pty`.
  CHECK(m::progress_is_live(a, facts(true, "bash", "/dev/pts/3")));
  // `... 2>log` at a terminal: the shell's terminal is not where we write.
  CHECK_FALSE(m::progress_is_live(a, facts(false, "bash", "/dev/pts/3")));
  // Under mpirun (or its aliases, or orted) whose stderr is the terminal.
  for (const char* launcher :
       {"mpirun", "mpiexec", "orterun", "mpirun.openmpi", "orted", "prterun"}) {
    CHECK(m::progress_is_live(a, facts(false, launcher, "/dev/pts/0")));
  }
  CHECK(m::progress_is_live(a, facts(false, "mpirun", "/dev/tty1")));
  CHECK(m::progress_is_live(a, facts(false, "mpirun", "/dev/console")));
  // mpirun writing to a file, a pipe (| tee), or nothing.
  CHECK_FALSE(m::progress_is_live(a, facts(false, "mpirun", "/tmp/log.txt")));
  CHECK_FALSE(m::progress_is_live(a, facts(false, "mpirun", "pipe:[12345]")));
  CHECK_FALSE(m::progress_is_live(a, facts(false, "mpirun", "")));
  // A SLURM batch step: slurmstepd's stderr is the job's log, never a terminal;
  // and a parent that is not Open MPI's launcher is never looked at.
  CHECK_FALSE(m::progress_is_live(a, facts(false, "slurmstepd", "/var/log/job.out")));
  CHECK_FALSE(m::progress_is_live(a, facts(false, "slurmstepd", "/dev/pts/1")));
}

TEST_CASE("live and lines override what auto would choose", "[progress]") {
  CHECK(m::progress_is_live(m::ProgressOutput::kLive, facts(false, "bash", "/tmp/x")));
  CHECK_FALSE(m::progress_is_live(m::ProgressOutput::kLines, facts(true, "mpirun", "/dev/pts/0")));
  const m::Progress lines(100, 10, false, m::ProgressOutput::kLines,
                          facts(true, "bash", "/dev/pts/0"));
  CHECK_FALSE(lines.live());
  const m::Progress live(100, 10, false, m::ProgressOutput::kAuto,
                         facts(false, "mpirun", "/dev/pts/0"));
  CHECK(live.live());
}
