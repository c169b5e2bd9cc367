// syncopt: one SPMD binary. Parses the command line, initialises MPI and
// hands over to a subcommand (commands.hpp). The single try/catch that turns
// errors into one message and a documented exit code lives here.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "comm/mpi.hpp"
#include "commands.hpp"
#include "common/error.hpp"
#include "common/signals.hpp"
#include "common/suggest.hpp"
#include "config/config.hpp"
#include "train/ending.hpp"

using namespace syncopt::app;

namespace {

// The subcommands with their first sentence, one per line.
std::string subcommand_list(const CLI::App& app) {
  std::string out = "subcommands:\n";
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    std::string d = sub->get_description();
    const auto end = d.find_first_of(".:(");
    if (end != std::string::npos) d.resize(end);
    while (!d.empty() && d.back() == ' ') d.pop_back();
    out += "  " + sub->get_name() +
           std::string(12 - std::min<std::size_t>(11, sub->get_name().size()), ' ') + d + "\n";
  }
  return out;
}

// `syncopt trian`: CLI11 would say only that a subcommand is required.
// Returns the message for a first word that is no subcommand, or "".
std::string unknown_subcommand(const CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return "";
  const std::string word = argv[1];
  std::string best;
  std::size_t best_d = 3;  // a typo or two, not another word
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
    if (sub->get_name() == word) return "";
    const std::size_t d = syncopt::edit_distance(word, sub->get_name());
    if (d < best_d || (sub->get_name().starts_with(word) && best.empty())) {
      best = sub->get_name();
      best_d = std::min(d, best_d);
    }
  }
  return "syncopt: unknown subcommand '" + word + "'" +
         (best.empty() ? "" : "; did you mean '" + best + "'?") + "\n" + subcommand_list(app) +
         "(syncopt SUBCOMMAND --help for each)\n";
}

// An error before the run directory could record it (a config that every
// rank refused, a failure of rank 0 outside a run): the outcome file of a
// wrapper script still gets it (train/ending.hpp).
void record_outcome(const syncopt::Error& e) {
  syncopt::train::write_outcome_file(syncopt::train::Outcome::failed(e), "", "");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace syncopt;
  // Stop signals only set a flag (docs/design.md §10): blocked before any thread
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
  app.set_version_flag("--version", version_text());

  TrainArgs targs;
  targs.argv.assign(argv, argv + argc);
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
  bool ckpt_fields = false;
  ckpts->add_flag("--fields", ckpt_fields,
                  "Also list every saved field of every part (kind and size)");

  std::string report_dir;
  auto* report = app.add_subcommand(
      "report",
      "Print what a run's records say: steps/s, step-time percentiles, time to the k-th "
      "gradient, drops per worker, staleness, accuracy of theta and EMA. A run without "
      "summary.json (running, paused, killed) is read from its records and marked "
      "INCOMPLETE, with why.");
  report->add_option("run_dir", report_dir, "A run directory, e.g. runs/fmnist-sync")->required();

  std::string export_dir, export_out;
  bool export_csv = true;
  auto* exporter = app.add_subcommand(
      "export",
      "Write a run's records as CSV: steps.csv (one row per update), grads.csv (one row per "
      "gradient received: arrival, accepted, staleness), eval.csv (one row per evaluation); "
      "into RUN_DIR/csv/ unless --out.");
  exporter->add_option("run_dir", export_dir, "A run directory, e.g. runs/fmnist-sync")->required();
  exporter->add_flag("--csv", export_csv, "CSV files (the one format, and the default)");
  exporter->add_option("--out", export_out, "Directory for the files (default RUN_DIR/csv)");

  SimulateArgs sargs;
  sargs.argv = targs.argv;
  auto* simulate = add_simulate_command(app, sargs);
  PlanArgs pargs;
  auto* plan = add_plan_command(app, pargs);
  SweepArgs wargs;
  auto* sweep = add_sweep_command(app, wargs);

  // MPI first: every mode runs under mpirun and the logger carries the rank.
  int code = 0;
  comm::MpiSession mpi(&argc, &argv);
  try {
    if (const std::string msg = unknown_subcommand(app, argc, argv); !msg.empty()) {
      if (mpi.rank() == 0) std::fputs(msg.c_str(), stderr);
      return static_cast<int>(ExitCode::kUsage);
    }
    try {
      app.parse(argc, argv);
    } catch (const CLI::Success& e) {
      if (mpi.rank() == 0) app.exit(e);
      return 0;
    } catch (const CLI::ParseError& e) {
      if (mpi.rank() == 0) {
        app.exit(e);
        if (app.get_subcommands().empty()) {
          std::fputs(subcommand_list(app).c_str(), stderr);
        }
        std::fprintf(stderr, "(see 'syncopt --help' or 'syncopt SUBCOMMAND --help')\n");
      }
      return static_cast<int>(ExitCode::kUsage);
    }
    if (train->parsed()) code = run_train(targs, mpi);
    if (report->parsed() && mpi.rank() == 0) code = run_report(report_dir);
    if (exporter->parsed() && mpi.rank() == 0) code = run_export(export_dir, export_out);
    if (keys->parsed() && mpi.rank() == 0) std::printf("%s", config::key_reference().c_str());
    if (ckpts->parsed() && mpi.rank() == 0) code = run_checkpoints(ckpt_dir, ckpt_fields);
    if (simulate->parsed() && mpi.rank() == 0) code = run_simulate(sargs);
    if (plan->parsed() && mpi.rank() == 0) code = run_plan(pargs);
    if (sweep->parsed() && mpi.rank() == 0) code = run_sweep(wargs);
  } catch (const AgreedError& e) {
    // Every rank knows of this error and ends cleanly; only the rank(s)
    // where it happened say why.
    code = static_cast<int>(e.code());
    if (e.reporter()) {
      std::fprintf(stderr, "\nsyncopt: error (rank %d on %s): %s\n", mpi.rank(), mpi.host().c_str(),
                   e.what());
    }
    if (mpi.rank() == 0) record_outcome(e);
  } catch (const EndedByPeerError& e) {
    // Another rank ended the job and said why: one line here, not a new
    // error. MPI_Finalize, which would wait for that rank, is skipped.
    code = static_cast<int>(e.code());
    std::fprintf(stderr, "syncopt: rank %d on %s: %s\n", mpi.rank(), mpi.host().c_str(), e.what());
    mpi.abandon();
  } catch (const AnnouncedError& e) {
    // This rank's own error; the ranks that need it have been told and end
    // by themselves, so nothing is aborted.
    code = static_cast<int>(e.code());
    std::fprintf(stderr, "\nsyncopt: error (rank %d on %s): %s\n", mpi.rank(), mpi.host().c_str(),
                 e.what());
    mpi.abandon();
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
    if (mpi.rank() == 0) record_outcome(e);
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
