// How a run was made, and what became of it. run.json in the run directory
// holds one entry per launch (a resumed run adds one): the command line, the
// config file(s) read and the overrides, the build (version, git commit),
// every rank's host and pid, the launcher and SLURM job ids, the layout of
// roles, and the start and end times with the outcome. run_status() says
// what a run directory without summary.json is (running, paused, killed),
// by the same rules as scripts/syncopt_runs.py's run_status(). docs/outputs.md
// describes the fields.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/peers.hpp"
#include "layout/roles.hpp"
#include "metrics/analysis.hpp"
#include "metrics/step_record.hpp"
#include "rundir/open.hpp"

namespace syncopt::rundir {

// What the command line and the build say; filled in by the app on every
// rank (rank 0's is recorded).
struct Invocation {
  std::vector<std::string> argv;
  std::string config_path;                // as given on the command line
  std::vector<std::string> config_files;  // every file read (a config and what it includes)
  std::vector<std::string> overrides;     // --set, in order
  std::string repeat_of;                  // a run directory whose config.toml this repeats
  std::string version;
  std::string git_commit;  // "unknown" when built outside git
  bool git_dirty = false;  // tracked files differed from the commit
  // This launch's id: $SYNCOPT_LAUNCH_ID (set by wrapper scripts), else
  // made up (new_id()); rank 0's is the job's.
  std::string launch_id;
  // An elastic restart by a wrapper script (scripts/run.sh,
  // scripts/slurm/train.sbatch): $SYNCOPT_RESTART, a JSON object saying
  // which restart this is and why; null otherwise. run.json records it as
  // the launch's `restart` (docs/outputs.md).
  nlohmann::json restart;
};

// A fresh random id (32 hex digits): a run's identity, a launch's.
std::string new_id();

// The job as rank 0 sees it: every rank's host and pid, and the roles.
struct LaunchFacts {
  std::vector<comm::Peer> ranks;  // empty: one process, no MPI job
  layout::Roles roles;
  // The one process's role when `ranks` is empty: "local" (a local run) or
  // "simulator" (syncopt simulate, whose layout is the simulated one).
  std::string process_role = "local";
};

// Rank 0's journal of this launch in <run_dir>/run.json, rewritten
// atomically: at start (end and status still null) and at the end. Every
// launch is recorded, one that failed before training too (its summary.json,
// if any, stays the previous one's). A default-constructed journal writes
// nothing.
//
// The run's identity: run.json holds a run_id, made when the run is
// created, and each launch the directory it ran in. A resumed run found
// elsewhere was moved (it keeps its id) or copied (the directory it came
// from still holds the same run): a copy is a new run with an id of its
// own, and says what it was copied from.
class RunJournal {
 public:
  RunJournal() = default;
  // OutputError (74) when run.json cannot be written; a run.json that is not
  // JSON (hand-edited) is kept aside as run.json.bad and a new one started.
  // `start_utc`: when the launch began, if not now (a simulation's journal
  // is written after it ran).
  RunJournal(const std::filesystem::path& run_dir, const std::string& run_name,
             const Invocation& inv, const LaunchFacts& facts, bool resumed,
             const std::string& start_utc = "");
  // Records the end of the launch (once; later calls do nothing); never
  // throws (a failure is logged).
  void finish(const Outcome& outcome) noexcept;
  bool open() const { return !m_path.empty() && !m_finished; }
  // Adds `key` to this launch's entry and writes (never throws).
  void note(const std::string& key, const nlohmann::json& value) noexcept;
  const std::string& run_id() const { return m_run_id; }

  // Another rank's way to record the end of launch `launch_id` of the run in
  // `run_dir` when rank 0 cannot (it is dead); never throws.
  static void record_end(const std::filesystem::path& run_dir, const std::string& launch_id,
                         const Outcome& outcome) noexcept;

 private:
  void write() const;
  std::filesystem::path m_path;
  nlohmann::json m_doc;
  std::string m_run_id;
  bool m_finished = false;
};

// The launch in Markdown, for TensorBoard's Text tab (run/command): the
// command line and the build.
std::string describe_invocation(const Invocation& inv);

// The time now, UTC, as run.json writes it: "2026-12-01T17:11:24Z".
std::string utc_now();

// What a run directory says of its run: "completed", "stopped" or "failed"
// (from summary.json); without one, "running", "paused" (SIGSTOP, a
// suspended job) or "killed" when run.json's rank 0 ran on this host, else
// "unknown"; `why` says so in a sentence (empty when completed), with the
// age of the last record and the checkpoint to resume from.
struct RunState {
  std::string status;
  std::string why;
  bool complete() const { return status == status_name(RunStatus::kCompleted); }
};
RunState run_status(const std::filesystem::path& run_dir);

// The RunInfo of a run read from its records alone (no summary.json): the
// layout from run.json (or config.toml and the records), examples and time
// from steps.jsonl, epochs from eval.jsonl's ratio (unknown without one).
metrics::RunInfo partial_run_info(const std::filesystem::path& run_dir,
                                  const std::vector<metrics::StepRecord>& steps,
                                  const std::vector<nlohmann::json>& evals);

// A free run name for repeating the run whose own config.toml was given
// (`syncopt train runs/<name>/config.toml`): <name>-2, -3, ... the first
// that does not exist in run.dir. Empty when `config_path` is not the
// config.toml of run.dir/run.name (not a repeat: an existing run stays an
// error, 73).
std::string repeat_name(const std::filesystem::path& config_path, const std::string& run_dir,
                        const std::string& run_name);

// A launch's layout as run.json records it: mode, world, shards,
// evaluator_rank, workers, N, b.
nlohmann::json describe_layout(const layout::Roles& roles);

// Who started this process, from its parent's name: "mpirun" (Open MPI's
// mpirun or its daemons on other nodes), "srun" (slurmstepd), "none" in a
// world of one rank started otherwise, else "unknown".
std::string launcher_name(int world);

// The words of the mpirun command line that started this process, up to the
// program (`mpirun --enable-recovery -np 7`), read from the parent process;
// empty when the parent is not mpirun itself (a daemon on another node, srun,
// a shell) or `program` (this process's argv[0]) is not on its line.
std::vector<std::string> mpirun_words(const std::string& program);

}  // namespace syncopt::rundir
