// The subcommands of the syncopt binary, one file each: train
// (train_command.cpp), report, export, keys and checkpoints
// (inspect_command.cpp), simulate and plan (sim_command.cpp), sweep
// (sweep_command.cpp). Each has add_X_command, which declares it on the
// command line, and run_X; main.cpp holds their table and dispatches.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "comm/mpi.hpp"
#include "rundir/meta.hpp"

namespace syncopt::app {

// The build, as ranks compare it (one build across ranks) and --version
// shows it: version, git commit ("unknown" outside git; "modified" when
// tracked files differed from it), build time (build_info.cpp).
extern const std::string kBuildId;
// kBuildId and the compute library (syncopt --version).
std::string version_text();
extern const char* const kVersion;
extern const char* const kGitCommit;
extern const bool kGitDirty;

// The command line and the build, as run.json records them.
rundir::Invocation make_invocation(const std::vector<std::string>& argv,
                                   const std::string& config_path,
                                   const std::vector<std::string>& overrides);
extern const char* const kExitCodes;

// `--set section.key=value` on `cmd`, into `overrides`: repeatable, one value
// per --set wherever it stands (before the config path too). Every
// subcommand that reads a config takes it this way.
CLI::Option* add_set_option(CLI::App* cmd, std::vector<std::string>& overrides,
                            const std::string& help);

struct TrainArgs {
  std::vector<std::string> argv;  // the whole command line, for run.json
  std::string config_path;
  std::vector<std::string> overrides;
  bool dry_run = false;
  bool quiet = false;
  bool verbose = false;
};
CLI::App* add_train_command(CLI::App& app, TrainArgs& args);
// The run's exit code (0 completed, 75 stopped, ...); ends MPI itself when a
// peer is dead (see main.cpp).
int run_train(const TrainArgs& args, comm::MpiSession& mpi);

// `report`, `export` and `checkpoints` read a run directory; `keys` reads
// nothing (inspect_command.cpp).
struct RunDirArgs {
  std::string dir;
  std::string out;           // export --out
  bool csv = false;          // export --csv (the default when no format is named)
  bool safetensors = false;  // export --safetensors
  bool fields = false;       // checkpoints --fields
};
CLI::App* add_keys_command(CLI::App& app);
CLI::App* add_checkpoints_command(CLI::App& app, RunDirArgs& args);
CLI::App* add_report_command(CLI::App& app, RunDirArgs& args);
CLI::App* add_export_command(CLI::App& app, RunDirArgs& args);
int run_keys();
int run_report(const std::string& dir);
int run_export(const RunDirArgs& args);
// fields: also every saved field of every part, with its kind and size.
int run_checkpoints(const std::string& dir, bool fields);

struct SimulateArgs {
  std::vector<std::string> argv;  // the whole command line, for run.json
  std::string config_path;
  std::vector<std::string> overrides;
  std::string from;
  bool quiet = false;
};
CLI::App* add_simulate_command(CLI::App& app, SimulateArgs& args);
int run_simulate(const SimulateArgs& args);

struct SweepArgs {
  std::string config_path;
  std::vector<std::string> axes;  // -m key=v1,v2
  std::vector<std::string> overrides;
  std::string out;
};
CLI::App* add_sweep_command(CLI::App& app, SweepArgs& args);
int run_sweep(const SweepArgs& args);

struct PlanArgs {
  int workers = 0;
  std::vector<std::string> runs;
  std::string sim_config;
  std::vector<std::string> overrides;
  std::string from;
  std::string n_values;
  double target_acc = 0.0;
  bool ema = false;
  std::vector<double> iters;
  int threads = 0;
  std::string out;
};
CLI::App* add_plan_command(CLI::App& app, PlanArgs& args);
int run_plan(const PlanArgs& args);

}  // namespace syncopt::app
