// syncopt: one SPMD binary. Parses the command line, initialises MPI, sets up
// logging, and hands over to the role's loop. The single try/catch that turns
// errors into one message and a documented exit code lives here.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include "comm/mpi.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "config/config.hpp"
#include "train/local.hpp"

namespace {

constexpr const char* kExitCodes =
    "Exit codes: 0 success, 64 command-line usage, 65 malformed input data, 66 missing input "
    "file, 70 internal error, 73 run directory exists or cannot be created, 74 write failed, "
    "78 configuration error.";

struct TrainArgs {
  std::string config_path;
  std::vector<std::string> overrides;
  bool dry_run = false;
  bool quiet = false;
  bool verbose = false;
};

int run_train(const TrainArgs& args, const syncopt::comm::MpiSession& mpi) {
  using namespace syncopt;
  const config::Config cfg = config::load(args.config_path, args.overrides);
  const int world = mpi.size();
  const std::string role = world == 1 ? "local" : "rank";
  setup_logging(mpi.rank(), role, args.verbose, args.quiet);
  if (args.dry_run) {
    if (mpi.rank() == 0) {
      std::printf("# resolved config (%s)\n%s\n", args.config_path.c_str(),
                  config::to_toml(cfg).c_str());
      std::printf("# layout: world of %d rank(s)\n", world);
      std::printf("rank 0: local trainer (train.mode = \"%s\" runs single-process here)\n",
                  cfg.train.mode.c_str());
    }
    return 0;
  }
  if (world > 1) {
    throw ConfigError("train.mode = \"" + cfg.train.mode + "\" with " + std::to_string(world) +
                      " ranks: distributed modes are not available in this build yet; run "
                      "without mpirun (one rank trains locally)");
  }
  if (cfg.train.mode != "local") {
    spdlog::info("world of one rank: train.mode = \"{}\" runs as local training", cfg.train.mode);
  }
  const train::LocalResult r = train::run_local(cfg, args.quiet);
  std::printf("\nsummary: %lld steps, %lld examples in %.1fs (%.0f examples/s training)\n",
              static_cast<long long>(r.steps), static_cast<long long>(r.examples), r.wall_s,
              r.examples_per_s);
  std::printf("         test accuracy %.2f%% (EMA %.2f%%), test loss %.4f\n",
              100.0 * r.final_eval.accuracy, 100.0 * r.final_eval_ema.accuracy,
              r.final_eval.loss);
  std::printf("         run directory: %s\n", r.run_dir.string().c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace syncopt;
  CLI::App app{
      "syncopt: synchronous SGD with backup workers (Chen et al., arXiv 1604.00981), "
      "asynchronous SGD with measured staleness, and their baselines, in one SPMD binary.\n"
      "Run single-process:  syncopt train configs/fmnist-local.toml\n"
      "Run under MPI:       mpirun -np 7 syncopt train CONFIG   (srun under SLURM)\n"
      "Override any key:    syncopt train CONFIG --set train.batch=64 --set optim.lr=0.1",
      "syncopt"};
  app.footer(kExitCodes);
  app.require_subcommand(1);
  app.set_version_flag("--version", "syncopt 0.1.0");

  TrainArgs targs;
  auto* train = app.add_subcommand(
      "train", "Train a model as described by a TOML config (see the key reference below).");
  train->add_option("config", targs.config_path, "TOML experiment file, e.g. configs/fmnist-local.toml")
      ->required();
  train->add_option("--set", targs.overrides,
                    "Override one key, section.key=value (repeatable), e.g. --set train.batch=64")
      ->type_name("KEY=VALUE");
  train->add_flag("--dry-run", targs.dry_run,
                  "Validate the config, print it resolved and the role of every rank, then exit");
  train->add_flag("-q,--quiet", targs.quiet, "Only warnings and the final summary");
  train->add_flag("-v,--verbose", targs.verbose, "Debug logging on every rank");
  train->footer("Config keys (TOML sections; every key has a default):\n" +
                config::key_reference() + "\n" + kExitCodes);

  // MPI first: every mode runs under mpirun and the logger carries the rank.
  int code = 0;
  comm::MpiSession mpi(&argc, &argv);
  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::Success& e) {
      if (mpi.rank() == 0) app.exit(e);
      return 0;
    } catch (const CLI::ParseError& e) {
      if (mpi.rank() == 0) {
        app.exit(e);
        std::fprintf(stderr, "(see 'syncopt --help' or 'syncopt train --help')\n");
      }
      return static_cast<int>(ExitCode::kUsage);
    }
    if (train->parsed()) code = run_train(targs, mpi);
  } catch (const Error& e) {
    code = static_cast<int>(e.code());
    // Config errors are a pure function of the input, so every rank sees the
    // same one: rank 0 prints it and all end cleanly. Anything else may have
    // happened on one rank only, so it ends the whole job.
    if (mpi.rank() == 0 || e.code() != ExitCode::kConfig) {
      std::fprintf(stderr, "\nsyncopt: error (rank %d on %s): %s\n", mpi.rank(),
                   mpi.host().c_str(), e.what());
    }
    if (mpi.size() > 1 && e.code() != ExitCode::kConfig) MPI_Abort(MPI_COMM_WORLD, code);
  } catch (const std::exception& e) {
    code = static_cast<int>(ExitCode::kInternal);
    std::fprintf(stderr, "\nsyncopt: internal error (rank %d on %s): %s\n", mpi.rank(),
                 mpi.host().c_str(), e.what());
    if (mpi.size() > 1) MPI_Abort(MPI_COMM_WORLD, code);
  }
  return code;
}
