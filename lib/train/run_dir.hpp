// The run directory at start: created for a new run, or, for a resumed one
// (run.resume = true), checked to be the same experiment and cleaned of what
// an interrupted checkpoint save left behind. And the outcome every run
// records in summary.json (docs/design.md §10).
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.hpp"
#include "config/config.hpp"

namespace syncopt::train {

// New run: creates <run.dir>/<run.name>/ (73 if it exists, unless
// run.overwrite) and writes config.toml. Resumed run: the directory and its
// config.toml must exist (66 otherwise) and describe the same experiment: a
// key that changes what is trained differs is a ConfigError (78) listing the
// keys; stale checkpoint temporaries are removed. Returns the directory.
std::filesystem::path open_run_dir(const config::Config& cfg);

// How a run ended, as summary.json says it:
//   completed (0) | stopped (75, by a signal) | failed (the error's code).
struct Outcome {
  ExitCode exit_code = ExitCode::kOk;
  std::string detail;  // "SIGTERM at step 120", or the error message

  RunStatus status() const { return status_of(exit_code); }
  static Outcome stopped(int signal, std::uint64_t step);
  static Outcome from_code(ExitCode code, const std::string& detail = "");
  static Outcome failed(const Error& e);
  // The summary.json fields: status, exit_code, and stopped or error.
  nlohmann::json to_json() const;
};

// Best effort after a failure: a summary.json that says the run failed, with
// the error, where none can be written normally. Never throws (logs).
void write_failure_summary(const std::filesystem::path& run_dir, const Outcome& outcome);

}  // namespace syncopt::train
