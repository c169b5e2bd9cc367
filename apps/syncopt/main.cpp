// syncopt: one SPMD binary, a doorway. Parses the command line, initialises
// MPI and hands over to the subcommand parsed, found in one table
// (CommandLine; each subcommand's own file, see commands.hpp). The single
// try that turns errors into one message and a documented exit code lives
// here (report_error).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "comm/flight.hpp"
#include "comm/mpi.hpp"
#include "commands.hpp"
#include "common/error.hpp"
#include "common/signals.hpp"
#include "common/suggest.hpp"
#include "rundir/ending.hpp"

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

// CLI11 (2.1) prints each description, footer and option text on one line
// however long (`syncopt --help` had one of 992 characters). Help is wrapped
// at kHelpWidth columns; a continuation is indented like the text it
// continues: an option's description column, or the line's own indent.
constexpr std::size_t kHelpWidth = 100;

std::string wrap_help(const std::string& text, std::size_t column) {
  std::string out;
  std::size_t begin = 0;
  while (begin < text.size()) {
    std::size_t end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(begin, end - begin);
    begin = end + 1;
    if (line.size() <= kHelpWidth) {
      out += line + (end < text.size() ? "\n" : "");
      continue;
    }
    const bool option_row = line.starts_with("  ") && line[2] != ' ' && column >= 4 &&
                            line.size() > column && line[column - 1] == ' ' &&
                            line[column - 2] == ' ' && line[column] != ' ';
    const std::size_t indent =
        option_row ? column : std::min(line.find_first_not_of(' '), kHelpWidth / 2);
    std::string row = line.substr(0, indent);
    bool first_word = true;
    for (std::size_t i = indent; i < line.size();) {
      std::size_t j = line.find(' ', i);
      if (j == std::string::npos) j = line.size();
      const std::string word = line.substr(i, j - i);
      if (!first_word && row.size() + 1 + word.size() > kHelpWidth) {
        out += row + "\n";
        row = std::string(indent, ' ') + word;
      } else {
        row += (first_word ? "" : " ") + word;
      }
      first_word = false;
      i = line.find_first_not_of(' ', j);
      if (i == std::string::npos) break;
    }
    out += row + (end < text.size() ? "\n" : "");
  }
  return out;
}

class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_help(const CLI::App* app, std::string name,
                        CLI::AppFormatMode mode) const override {
    return wrap_help(CLI::Formatter::make_help(app, std::move(name), mode), get_column_width());
  }
};

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
// wrapper script still gets it (rundir/ending.hpp).
void record_outcome(const syncopt::Error& e) {
  syncopt::rundir::write_outcome_file(syncopt::rundir::Outcome::failed(e), "", "");
}

// The command line: CLI11's parser, every subcommand's arguments, and the
// table of subcommands in the order `syncopt --help` lists them.
class CommandLine {
 public:
  CommandLine(int argc, char** argv);
  CommandLine(const CommandLine&) = delete;  // CLI11 and the table hold addresses inside
  CommandLine& operator=(const CommandLine&) = delete;

  // The exit code when the command line ends the run here (a usage error,
  // --help, --version: rank 0 says so); nullopt when a subcommand is to run.
  std::optional<int> parse(int argc, char** argv, const syncopt::comm::MpiSession& mpi);
  // The parsed subcommand's exit code: train runs on every rank, the others
  // on rank 0 alone (0 elsewhere).
  int run(syncopt::comm::MpiSession& mpi) const;

 private:
  struct Subcommand {
    CLI::App* cli = nullptr;
    bool every_rank = false;
    std::function<int(syncopt::comm::MpiSession&)> run;
  };

  CLI::App m_app{
      "syncopt: synchronous SGD with backup workers (Chen et al., arXiv 1604.00981), "
      "asynchronous SGD with measured staleness, and their baselines, in one SPMD binary.\n"
      "Run single-process:  syncopt train configs/fmnist-local.toml\n"
      "Run under MPI:       mpirun -np 7 syncopt train CONFIG   (srun under SLURM)\n"
      "Override any key:    syncopt train CONFIG --set train.batch=64 --set optim.lr=0.1",
      "syncopt"};
  TrainArgs m_train;
  RunDirArgs m_checkpoints, m_report, m_export;
  SimulateArgs m_simulate;
  PlanArgs m_plan;
  SweepArgs m_sweep;
  std::vector<Subcommand> m_table;
};

CommandLine::CommandLine(int argc, char** argv) {
  // Before the subcommands are added: each takes its parent's formatter.
  m_app.formatter(std::make_shared<HelpFormatter>());
  m_app.footer(kExitCodes);
  m_app.require_subcommand(1);
  m_app.set_version_flag("--version", version_text());
  m_train.argv.assign(argv, argv + argc);
  m_simulate.argv = m_train.argv;
  using syncopt::comm::MpiSession;
  // (A braced list is evaluated in order: the subcommands are added in this one.)
  m_table = {
      {add_train_command(m_app, m_train), true,
       [this](MpiSession& mpi) { return run_train(m_train, mpi); }},
      {add_keys_command(m_app), false, [](MpiSession&) { return run_keys(); }},
      {add_checkpoints_command(m_app, m_checkpoints), false,
       [this](MpiSession&) { return run_checkpoints(m_checkpoints.dir, m_checkpoints.fields); }},
      {add_report_command(m_app, m_report), false,
       [this](MpiSession&) { return run_report(m_report.dir); }},
      {add_export_command(m_app, m_export), false,
       [this](MpiSession&) { return run_export(m_export); }},
      {add_simulate_command(m_app, m_simulate), false,
       [this](MpiSession&) { return run_simulate(m_simulate); }},
      {add_plan_command(m_app, m_plan), false, [this](MpiSession&) { return run_plan(m_plan); }},
      {add_sweep_command(m_app, m_sweep), false,
       [this](MpiSession&) { return run_sweep(m_sweep); }},
  };
}

std::optional<int> CommandLine::parse(int argc, char** argv, const syncopt::comm::MpiSession& mpi) {
  using syncopt::ExitCode;
  if (const std::string msg = unknown_subcommand(m_app, argc, argv); !msg.empty()) {
    if (mpi.rank() == 0) std::fputs(msg.c_str(), stderr);
    return static_cast<int>(ExitCode::kUsage);
  }
  try {
    m_app.parse(argc, argv);
  } catch (const CLI::Success& e) {
    if (mpi.rank() == 0) m_app.exit(e);
    return 0;
  } catch (const CLI::ParseError& e) {
    if (mpi.rank() == 0) {
      m_app.exit(e);
      if (m_app.get_subcommands().empty()) {
        std::fputs(subcommand_list(m_app).c_str(), stderr);
      }
      std::fprintf(stderr, "(see 'syncopt --help' or 'syncopt SUBCOMMAND --help')\n");
    }
    return static_cast<int>(ExitCode::kUsage);
  }
  return std::nullopt;
}

int CommandLine::run(syncopt::comm::MpiSession& mpi) const {
  for (const Subcommand& s : m_table) {
    if (s.cli->parsed() && (s.every_rank || mpi.rank() == 0)) return s.run(mpi);
  }
  return 0;
}

// "syncopt: error (rank R on HOST): WHAT" after a blank line, on stderr.
// Then, when this rank dumped its flight recorder, where the dumps are.
void print_error(const syncopt::comm::MpiSession& mpi, const char* what,
                 const char* kind = "error") {
  std::fprintf(stderr, "\nsyncopt: %s (rank %d on %s): %s\n", kind, mpi.rank(), mpi.host().c_str(),
               what);
  if (const std::string note = syncopt::comm::flight::ending_note(); !note.empty()) {
    std::fprintf(stderr, "syncopt: %s\n", note.c_str());
  }
}

// The one root-cause block of an error that ended this rank's part, and the
// exit code to end with: each kind of error says where it happened and
// decides whether the other ranks must be ended too.
int report_error(const std::exception_ptr& error, syncopt::comm::MpiSession& mpi) {
  using namespace syncopt;
  try {
    std::rethrow_exception(error);
  } catch (const AgreedError& e) {
    // Every rank knows of this error and ends cleanly; only the rank(s)
    // where it happened say why.
    if (e.reporter()) print_error(mpi, e.what());
    if (mpi.rank() == 0) record_outcome(e);
    return static_cast<int>(e.code());
  } catch (const EndedByPeerError& e) {
    // Another rank ended the job and said why: one line here, not a new
    // error. MPI_Finalize, which would wait for that rank, is skipped.
    std::fprintf(stderr, "syncopt: rank %d on %s: %s\n", mpi.rank(), mpi.host().c_str(), e.what());
    mpi.abandon();
    return static_cast<int>(e.code());
  } catch (const AnnouncedError& e) {
    // This rank's own error; the ranks that need it have been told and end
    // by themselves, so nothing is aborted.
    print_error(mpi, e.what());
    mpi.abandon();
    return static_cast<int>(e.code());
  } catch (const UnavailableError& e) {
    // A peer this rank needs is dead: the others find out by themselves.
    // Nothing is aborted, and MPI_Finalize, which would wait for the dead
    // peer, is skipped.
    print_error(mpi, e.what());
    mpi.abandon();
    return static_cast<int>(e.code());
  } catch (const Error& e) {
    // Raised on this rank alone (outside any agreement): the other ranks may
    // be waiting for it, so it ends the whole job.
    const int code = static_cast<int>(e.code());
    print_error(mpi, e.what());
    if (mpi.rank() == 0) record_outcome(e);
    if (mpi.size() > 1) MPI_Abort(MPI_COMM_WORLD, code);
    return code;
  } catch (const std::bad_alloc& e) {
    // An allocation failed (OutOfMemory says of how many bytes): not a bug.
    const int code = static_cast<int>(ExitCode::kOutOfMemory);
    print_error(mpi, e.what(), "out of memory");
    std::fputs(
        "  this process could not get the memory it asked for: use a smaller model or batch, "
        "fewer ranks per node, or a machine (or ulimit -v, cgroup) with more memory\n",
        stderr);
    if (mpi.rank() == 0) record_outcome(Error(ExitCode::kOutOfMemory, e.what()));
    if (mpi.size() > 1) MPI_Abort(MPI_COMM_WORLD, code);
    return code;
  } catch (const std::exception& e) {
    const int code = static_cast<int>(ExitCode::kInternal);
    print_error(mpi, e.what(), "internal error");
    if (mpi.size() > 1) MPI_Abort(MPI_COMM_WORLD, code);
    return code;
  }
}

}  // namespace

// Parse, pick the subcommand, hand over; one try turns any error into one
// message and a documented exit code (report_error).
int main(int argc, char** argv) {
  // Stop signals only set a flag (docs/design.md §10): blocked before any thread
  // starts, taken by a thread of their own.
  syncopt::install_stop_handlers();
  CommandLine command_line(argc, argv);
  // MPI first: every mode runs under mpirun and the logger carries the rank.
  syncopt::comm::MpiSession mpi(&argc, &argv);
  int code = 0;
  try {
    if (const auto done = command_line.parse(argc, argv, mpi)) return *done;
    code = command_line.run(mpi);
  } catch (...) {
    code = report_error(std::current_exception(), mpi);
  }
  mpi.finalize(code);
  return code;
}
