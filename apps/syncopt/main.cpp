// syncopt: one SPMD binary. Parses the command line, initialises MPI, sets up
// logging, and hands over to the role's loop. The single try/catch that turns
// errors into one message and a documented exit code lives here.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "comm/mpi.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "common/signals.hpp"
#include "config/config.hpp"
#include "metrics/analysis.hpp"
#include "comm/agree.hpp"
#include "nn/model.hpp"
#include "train/distributed.hpp"
#include "train/local.hpp"
#include "layout/roles.hpp"
#include "platform.hpp"

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

// Image shape the data set will have, for --dry-run (which loads nothing).
syncopt::nn::ModelSpec dry_run_spec(const syncopt::config::Config& cfg) {
  syncopt::nn::ModelSpec spec;
  spec.name = cfg.model.name;
  spec.weight_norm = cfg.model.weight_norm;
  spec.mlp_hidden = static_cast<int>(cfg.model.mlp_hidden);
  if (cfg.data.name == "cifar10") {
    spec.channels = 3;
    spec.height = spec.width = 32;
  }
  return spec;
}

// --dry-run: the resolved config, the role of every rank, and where each
// computes (the GPU from the node-local rank, as training will pick it).
void print_dry_run(const TrainArgs& args, const syncopt::config::Config& cfg,
                   const syncopt::layout::Roles& roles, const syncopt::train::Compute& compute,
                   const syncopt::comm::MpiSession& mpi) {
  using namespace syncopt;
  const auto layout = nn::param_layout(dry_run_spec(cfg));
  constexpr int kLine = 160;
  const int world = mpi.size();
  const int local_rank = comm::node_local_rank(MPI_COMM_WORLD);
  const std::string where = mpi.host() + ", node-local rank " + std::to_string(local_rank) +
                            ", compute " + compute.describe(local_rank);
  std::vector<char> lines(static_cast<std::size_t>(world) * kLine, 0);
  std::vector<char> mine(kLine, 0);
  where.copy(mine.data(), kLine - 1);
  SYNCOPT_CHECK_MPI(
      MPI_Gather(mine.data(), kLine, MPI_CHAR, lines.data(), kLine, MPI_CHAR, 0, MPI_COMM_WORLD));
  if (mpi.rank() != 0) return;
  std::printf("# resolved config (%s)\n%s\n", args.config_path.c_str(), config::to_toml(cfg).c_str());
  if (world == 1 && cfg.train.mode != config::Mode::kLocal) {
    std::printf("# train.mode = \"%s\" runs single-process in a world of one rank\n",
                std::string(config::mode_name(cfg.train.mode)).c_str());
  }
  std::printf("%s# placement:\n", layout::describe(roles, layout.count).c_str());
  for (int r = 0; r < world; ++r) {
    // Shards apply the optimiser on the host: the update is a few
    // element-wise passes over their slice, and the gradients arrive in host
    // memory through MPI anyway.
    const bool shard = roles.role_of(r) == layout::Role::kShard && roles.shards > 0;
    std::printf("rank %d: %s%s\n", r, lines.data() + kLine * r,
                shard ? " (a shard applies its updates on the CPU)" : "");
  }
}

int run_train(const TrainArgs& args, const syncopt::comm::MpiSession& mpi) {
  using namespace syncopt;
  // Every rank reads the config and fits the layout; a problem on any rank
  // (a file missing on one node) is agreed on, and reported once.
  config::Config cfg;
  layout::Roles roles;
  train::Compute compute;
  comm::agree(MPI_COMM_WORLD, [&] {
    cfg = config::load(args.config_path, args.overrides);
    roles = layout::make_roles(cfg, mpi.size());
    compute = app::make_compute(cfg.compute.backend, static_cast<int>(cfg.compute.threads),
                                cfg.cluster.dead_after_s);
  });
  const bool local = mpi.size() == 1;
  setup_logging(mpi.rank(), local ? "local" : roles.role_name(mpi.rank()), args.verbose,
                args.quiet);
  if (args.dry_run) {
    print_dry_run(args, cfg, roles, compute, mpi);
    return 0;
  }
  if (local) {
    if (cfg.train.mode != config::Mode::kLocal) {
      spdlog::info("world of one rank: train.mode = \"{}\" runs as local training (start it "
                   "with mpirun -np K for the distributed mode)",
                   config::mode_name(cfg.train.mode));
    }
    const train::LocalResult r = train::run_local(cfg, compute, args.quiet);
    std::printf("\nsummary: %lld steps, %lld examples in %.1fs (%.0f examples/s training)\n",
                static_cast<long long>(r.steps), static_cast<long long>(r.examples), r.wall_s,
                r.examples_per_s);
    std::printf("         test accuracy %.2f%% (EMA %.2f%%), test loss %.4f\n",
                100.0 * r.final_eval.accuracy, 100.0 * r.final_eval_ema.accuracy,
                r.final_eval.loss);
    std::printf("         run directory: %s\n", r.run_dir.string().c_str());
    if (r.outcome.status == "stopped") {
      std::printf("stopped (%s) with a checkpoint: continue with --set run.resume=true\n",
                  r.outcome.detail.c_str());
    }
    return static_cast<int>(r.outcome.exit_code);
  }
  const train::DistributedResult r = train::run_distributed(cfg, compute, args.quiet);
  if (mpi.rank() == 0) {
    std::printf("\n%s", r.report.c_str());
    std::printf("run directory: %s  (syncopt report %s; scripts/plot.py %s)\n",
                r.run_dir.string().c_str(), r.run_dir.string().c_str(),
                r.run_dir.string().c_str());
    if (r.outcome.status == "stopped") {
      std::printf("stopped (%s) with a checkpoint: continue with --set run.resume=true\n",
                  r.outcome.detail.c_str());
    }
  }
  return static_cast<int>(r.outcome.exit_code);
}

int run_report(const std::string& dir) {
  using namespace syncopt;
  const std::filesystem::path run(dir);
  if (!std::filesystem::exists(run / "summary.json")) {
    throw MissingInputError("'" + (run / "summary.json").string() +
                            "' not found: give the directory of a finished run (runs/<name>)");
  }
  std::ifstream in(run / "summary.json");
  nlohmann::json summary;
  try {
    in >> summary;
  } catch (const std::exception& e) {
    throw DataError((run / "summary.json").string() + ": not JSON (" + e.what() + ")");
  }
  const auto steps = metrics::read_steps(run / "steps.jsonl");
  const auto evals = std::filesystem::exists(run / "eval.jsonl")
                         ? metrics::read_jsonl(run / "eval.jsonl")
                         : std::vector<nlohmann::json>{};
  const auto info = metrics::run_info_from_summary(summary);
  const auto an = metrics::analyze(steps, info);
  std::printf("run %s\n%s", dir.c_str(), metrics::format_report(an, evals).c_str());
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

  auto* keys = app.add_subcommand(
      "keys", "Print the reference of every config key: type, default, allowed values, meaning "
              "(the same as the end of 'syncopt train --help'; configs/README.md holds a copy).");

  std::string report_dir;
  auto* report = app.add_subcommand(
      "report", "Print what a finished run's records say: steps/s, step-time percentiles, time "
                "to the k-th gradient, drops per worker, staleness, accuracy of theta and EMA.");
  report->add_option("run_dir", report_dir, "A run directory, e.g. runs/fmnist-sync")->required();

  // Stop signals only set a flag, from the very start (DESIGN.md §10).
  install_stop_handlers();
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
    if (report->parsed() && mpi.rank() == 0) code = run_report(report_dir);
    if (keys->parsed() && mpi.rank() == 0) std::printf("%s", config::key_reference().c_str());
  } catch (const AgreedError& e) {
    // Every rank knows of this error and ends cleanly; only the rank(s)
    // where it happened say why.
    code = static_cast<int>(e.code());
    if (e.reporter()) {
      std::fprintf(stderr, "\nsyncopt: error (rank %d on %s): %s\n", mpi.rank(),
                   mpi.host().c_str(), e.what());
    }
  } catch (const Error& e) {
    // Raised on this rank alone (outside any agreement): the other ranks may
    // be waiting for it, so it ends the whole job.
    code = static_cast<int>(e.code());
    std::fprintf(stderr, "\nsyncopt: error (rank %d on %s): %s\n", mpi.rank(), mpi.host().c_str(),
                 e.what());
    if (mpi.size() > 1) MPI_Abort(MPI_COMM_WORLD, code);
  } catch (const std::exception& e) {
    code = static_cast<int>(ExitCode::kInternal);
    std::fprintf(stderr, "\nsyncopt: internal error (rank %d on %s): %s\n", mpi.rank(),
                 mpi.host().c_str(), e.what());
    if (mpi.size() > 1) MPI_Abort(MPI_COMM_WORLD, code);
  }
  return code;
}
