// The run directory at start: created for a new run, or, for a resumed one
// (run.resume = true), taken where it is and checked to be the same
// experiment; either way locked for the run's life (lock.hpp). And the
// outcome every run records in summary.json (docs/design.md §10).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "config/config.hpp"
#include "rundir/lock.hpp"

namespace syncopt::rundir {

// The run directory this process owns: its path and its lock.
struct OpenedRun {
  std::filesystem::path dir;
  RunLock lock;
};

// New run: creates <run.dir>/<run.name>/ (73 if it exists, naming the job
// that holds it when one does; with run.overwrite its contents are replaced
// once its lock is ours) and writes config.toml. Resumed run: the directory
// must hold a run (66 otherwise); its lock is taken before anything is
// written (73 naming the holder, nothing changed), then stale checkpoint
// temporaries are removed. The config is checked by check_resume().
OpenedRun open_run_dir(const config::Config& cfg, const LockHolder& me);

// The first check of open_run_dir for a new run, alone: 73 when
// <run.dir>/<run.name> exists and neither run.resume nor run.overwrite is
// set, saying how to pick a new name, repeat, resume or replace it. Run
// before the data are loaded, so that a repeated command fails at once.
void check_new_run_dir(const config::Config& cfg);

// Keys a resumed run may change without being another experiment: how it is
// run and recorded, where its directory is (it may have moved), and the
// length of training with the schedule keys that depend on it (extending a
// run: docs/design.md §10).
bool resume_may_change(const std::string& key);

// A resumed run: `cfg` must describe the experiment of `dir`/config.toml; a
// ConfigError (78) lists every key that differs otherwise. A launch of
// another number of ranks than the run's last one (run.json) is one
// ConfigError saying how to resume or start anew (`world`: this launch's
// ranks; 0 skips the check; `launch_id`: this launch, whose own entry in
// run.json is not the run's). Returns the keys that changed (for run.json
// and the log); the caller rewrites config.toml (rewrite_config) once the
// run goes on.
std::vector<std::string> check_resume(const config::Config& cfg, const std::filesystem::path& dir,
                                      int world, const std::string& launch_id = "");

// What a checkpoint records of its run (checkpoint::Manifest::run), so that
// a resume is checked against what the run was when it saved, not against
// config.toml, which may have been edited since: `experiment`, every key a
// resume may not change with its value as config.toml writes it, and
// `layout`, the launch's (run.json's form, describe_layout).
nlohmann::json checkpoint_stamp(const config::Config& cfg, const nlohmann::json& layout);

// A layout (run.json's form) in words: "6 ranks: 1 shard, 5 workers".
std::string layout_words(const nlohmann::json& layout);

// config.toml of a resumed run: the resolved config of this launch (its
// location and length included), written atomically.
void rewrite_config(const config::Config& cfg, const std::filesystem::path& dir);

// The config a resume starts from when the config given is a run
// directory's own config.toml (`syncopt train runs/a/config.toml --set
// run.resume=true`): that directory, where it is, by whatever path it was
// given, unless run.dir or run.name were set on the command line. Sets
// run.dir and run.name of `cfg` and returns true when it applies.
bool resume_in_place(config::Config& cfg, const std::filesystem::path& config_path,
                     const std::vector<std::string>& overrides);

// How a run ended, as summary.json says it:
//   completed (0) | stopped (75, by a signal) | failed (the error's code).
struct Outcome {
  ExitCode exit_code = ExitCode::kOk;
  std::string detail;  // "SIGTERM at step 120", or the error message
  // The rank whose finding this is ({"rank", "role", "host", "pid"}), when
  // known: the rank that found a peer dead, or that failed.
  nlohmann::json reported_by;

  RunStatus status() const { return status_of(exit_code); }
  static Outcome stopped(int signal, std::uint64_t step);
  static Outcome from_code(ExitCode code, const std::string& detail = "");
  static Outcome failed(const Error& e);
  // The summary.json fields: status, exit_code, reason, reported_by, and
  // stopped or error.
  nlohmann::json to_json() const;
};

// Best effort after a failure: a summary.json that says the run failed, with
// the error, where none can be written normally; `extra` fields are added
// (launch_id, ...). Never throws (logs).
void write_failure_summary(const std::filesystem::path& run_dir, const Outcome& outcome,
                           const nlohmann::json& extra = nlohmann::json::object());

}  // namespace syncopt::rundir
