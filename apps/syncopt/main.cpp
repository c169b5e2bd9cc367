// syncopt: one SPMD binary. Parses the command line, initialises MPI and
// hands over to a subcommand (commands.hpp). The single try/catch that turns
// errors into one message and a documented exit code lives here.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "comm/mpi.hpp"
#include "commands.hpp"
#include "common/error.hpp"
#include "common/signals.hpp"
#include "config/config.hpp"

using namespace syncopt::app;

int main(int argc, char** argv) {
  using namespace syncopt;
  // Stop signals only set a flag (DESIGN.md §10): blocked before any thread
  // starts, taken by a thread of their own.
  install_stop_handlers();
  CLI::App app{
      "syncopt: synchronous SGD with backup workers (Chen et al., arXiv 1604.00981), "
      "asynchronous SGD with measured staleness, and their baselines, in one SPMD binary.\n"
      "Run single-process:  syncopt train configs/fmnist-local.toml\n"
      "Run under MPI:       mpirun -np 7 syncopt train CONFIG   (srun under SLURM)\n"
      "Override any key:    syncopt train CONFIG --set train.batch=64 --set optim.lr=0.1",
      "syncopt"};
  app.footer(kExitCodes);
  app.require_subcommand(1);
  app.set_version_flag("--version", kBuildId);

  TrainArgs targs;
  auto* train = add_train_command(app, targs);

  auto* keys = app.add_subcommand(
      "keys",
      "Print the reference of every config key: type, default, allowed values, meaning "
      "(the same as the end of 'syncopt train --help'; configs/README.md holds a copy).");

  std::string ckpt_dir;
  auto* ckpts =
      app.add_subcommand("checkpoints",
                         "List a run's checkpoints and verify the latest: every part's size and "
                         "CRC-32 against its manifest, and every saved float finite (65 if not, "
                         "66 if there is none).");
  ckpts->add_option("run_dir", ckpt_dir, "A run directory, e.g. runs/fmnist-sync")->required();

  std::string report_dir;
  auto* report = app.add_subcommand(
      "report",
      "Print what a finished run's records say: steps/s, step-time percentiles, time "
      "to the k-th gradient, drops per worker, staleness, accuracy of theta and EMA.");
  report->add_option("run_dir", report_dir, "A run directory, e.g. runs/fmnist-sync")->required();

  SimulateArgs sargs;
  auto* simulate = add_simulate_command(app, sargs);
  PlanArgs pargs;
  auto* plan = add_plan_command(app, pargs);

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
    if (ckpts->parsed() && mpi.rank() == 0) code = run_checkpoints(ckpt_dir);
    if (simulate->parsed() && mpi.rank() == 0) code = run_simulate(sargs);
    if (plan->parsed() && mpi.rank() == 0) code = run_plan(pargs);
  } catch (const AgreedError& e) {
    // Every rank knows of this error and ends cleanly; only the rank(s)
    // where it happened say why.
    code = static_cast<int>(e.code());
    if (e.reporter()) {
      std::fprintf(stderr, "\nsyncopt: error (rank %d on %s): %s\n", mpi.rank(), mpi.host().c_str(),
                   e.what());
    }
  } catch (const UnavailableError& e) {
    // A peer this rank needs is dead: the others find out by themselves.
    // Nothing is aborted, and MPI_Finalize, which would wait for the dead
    // peer, is skipped.
    code = static_cast<int>(e.code());
    std::fprintf(stderr, "\nsyncopt: error (rank %d on %s): %s\n", mpi.rank(), mpi.host().c_str(),
                 e.what());
    mpi.abandon();
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
  mpi.finalize(code);
  return code;
}
