// `syncopt train`: load and check the config on every rank, then the local
// trainer (a world of one rank) or the distributed one (see commands.hpp).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "comm/agree.hpp"
#include "comm/flight.hpp"
#include "comm/peers.hpp"
#include "commands.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "config/config.hpp"
#include "layout/roles.hpp"
#include "nn/graph.hpp"
#include "nn/model.hpp"
#include "platform.hpp"
#include "rundir/meta.hpp"
#include "rundir/open.hpp"
#include "train/distributed.hpp"
#include "train/inputs.hpp"
#include "train/local.hpp"

namespace syncopt::app {

const char* const kExitCodes =
    "Exit codes: 0 success, 64 command-line usage, 65 malformed input data or a corrupt "
    "checkpoint, 66 missing input file or nothing to resume, 69 the run cannot go on (too few "
    "live workers, a dead shard or evaluator; a checkpoint is saved), 70 internal error or "
    "divergence, 71 out of memory (the size is in the message), 73 run directory exists or "
    "cannot be created, 74 write failed, 75 stopped by a signal with a checkpoint (resume with "
    "--set run.resume=true), 78 configuration error (also a model that cannot fit in memory), "
    "128+N ended by signal N before training began. "
    "Under mpirun --enable-recovery mpirun itself exits 0 whatever happened: the run's outcome "
    "is in runs/<name>/summary.json (status, exit_code).";

namespace {

// The command line again, with quotes where a word needs them.
std::string shell_words(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) {
    const bool plain = !w.empty() && w.find_first_not_of(
                                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLM"
                                         "NOPQRSTUVWXYZ0123456789-_./=:,+@%") == std::string::npos;
    out += (out.empty() ? "" : " ") + (plain ? w : "'" + w + "'");
  }
  return out;
}

// What to run instead of a distributed config in one process: the same
// command under mpirun with one rank per role, K = b + 4 workers (N = 4).
std::string mpi_line(const TrainArgs& args, const syncopt::config::Config& cfg) {
  using namespace syncopt;
  const auto& t = config::traits(cfg.train.mode);
  const long b = !t.has_backups ? 0
                 : config::is_auto(cfg.train.backups)
                     ? 1
                     : std::max<long>(1, std::get<std::int64_t>(cfg.train.backups));
  const long others = t.uses_ps ? cfg.cluster.ps + (cfg.cluster.evaluator ? 1 : 0) : 0;
  const long workers = t.has_backups ? b + 4 : 4;
  std::vector<std::string> words = args.argv;
  if (words.size() > 1) {
    words.erase(std::remove(words.begin() + 1, words.end(), std::string("--dry-run")), words.end());
  }
  std::string line = "mpirun -np " + std::to_string(others + workers) + " " + shell_words(words);
  if (t.uses_ps) {
    line += "   (" + std::to_string(cfg.cluster.ps) + " parameter server(s)" +
            (cfg.cluster.evaluator ? ", 1 evaluator" : "") + ", " + std::to_string(workers) +
            " workers; each further rank is one more worker)";
  }
  return line;
}

// --dry-run's hosts, each with its ranks and their roles (a host file's
// slots fill in order): `lines` holds kLine characters per rank, each
// starting with the rank's host and ", node-local".
void print_hosts(const char* lines, int line_chars, int world,
                 const syncopt::layout::Roles& roles) {
  std::vector<std::pair<std::string, std::string>> hosts;
  for (int r = 0; r < world; ++r) {
    const std::string line = lines + static_cast<std::ptrdiff_t>(line_chars) * r;
    const std::string host = line.substr(0, line.find(", node-local"));
    auto it =
        std::find_if(hosts.begin(), hosts.end(), [&](const auto& h) { return h.first == host; });
    if (it == hosts.end()) it = hosts.insert(hosts.end(), {host, ""});
    it->second += (it->second.empty() ? "" : ", ") + std::to_string(r) + " " + roles.role_name(r);
  }
  std::printf("# hosts: %zu\n", hosts.size());
  for (const auto& [host, ranks] : hosts)
    std::printf("%s: ranks %s\n", host.c_str(), ranks.c_str());
}

// --dry-run: the resolved config, the role of every rank, and where each
// computes (the GPU from the node-local rank, as training will pick it).
void print_dry_run(const TrainArgs& args, const syncopt::config::Config& cfg,
                   const syncopt::layout::Roles& roles, const syncopt::train::Compute& compute,
                   const syncopt::comm::MpiSession& mpi) {
  using namespace syncopt;
  const nn::Graph graph = nn::model_graph(train::expected_model_spec(cfg));
  const nn::ParamLayout& layout = graph.layout;
  // Whole layers per shard, balanced by bytes, and the exchange's buckets
  // (every rank: a model with fewer layers than shards fails on all alike).
  const auto groups = train::layout_groups(train::expected_model_spec(cfg));
  const auto slices = roles.shards > 0 ? layout::balanced_slices(groups, roles.shards)
                                       : std::vector<layout::Slice>{};
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
  std::printf("# resolved config (%s)\n%s\n", args.config_path.c_str(),
              config::to_toml(cfg).c_str());
  if (world == 1 && cfg.train.mode != config::Mode::kLocal) {
    std::printf(
        "# NOTE: train.mode = \"%s\" needs MPI; started like this, without mpirun, "
        "the run is refused:\n# %s\n",
        std::string(config::mode_name(cfg.train.mode)).c_str(), mpi_line(args, cfg).c_str());
  }
  std::printf("%s", layout::describe(roles, slices).c_str());
  if (roles.shards > 0) {
    std::printf("%s", layout::describe_placement(
                          groups, slices, cfg.exchange.pipeline ? cfg.exchange.bucket_bytes : 0)
                          .c_str());
  }
  std::printf("# placement:\n");
  for (int r = 0; r < world; ++r) {
    // Shards apply the optimiser on the host: the update is a few
    // element-wise passes over their slice, and the gradients arrive in host
    // memory through MPI anyway.
    const bool shard = roles.role_of(r) == layout::Role::kShard && roles.shards > 0;
    std::printf("rank %d: %s%s\n", r, lines.data() + kLine * r,
                shard ? " (a shard applies its updates on the CPU)" : "");
  }
  print_hosts(lines.data(), kLine, world, roles);
  std::printf("# %s\n", nn::graph_summary(graph).c_str());
  // What the run's params.f32 will hold (docs/outputs.md).
  std::printf(
      "# params.f32 and params_ema.f32: %zu float32 values (little-endian), in this order:\n"
      "#   %-12s %-18s %10s %10s\n",
      layout.count, "name", "shape", "offset", "count");
  for (const auto& v : layout.views) {
    std::string shape = "[";
    for (std::size_t i = 0; i < v.shape.size(); ++i) {
      shape += (i ? ", " : "") + std::to_string(v.shape[i]);
    }
    shape += "]";
    std::printf("#   %-12s %-18s %10zu %10zu\n", v.name.c_str(), shape.c_str(), v.offset, v.count);
  }
}

// FNV-1a, 64 bits: a fingerprint, not a defence against tampering.
std::uint64_t fingerprint(const std::string& text) {
  std::uint64_t h = 1469598103934665603ULL;
  for (const unsigned char c : text) h = (h ^ c) * 1099511628211ULL;
  return h;
}

// ConfigError naming the ranks whose config or build differs from rank 0's.
void check_same_job(const syncopt::config::Config& cfg, syncopt::comm::MpiSession& mpi) {
  using namespace syncopt;
  const std::uint64_t mine[2] = {fingerprint(config::to_toml(cfg)), fingerprint(kBuildId)};
  std::vector<std::uint64_t> all(static_cast<std::size_t>(2 * mpi.size()));
  SYNCOPT_CHECK_MPI(
      MPI_Allgather(mine, 2, MPI_UINT64_T, all.data(), 2, MPI_UINT64_T, MPI_COMM_WORLD));
  std::string config_ranks, build_ranks;
  for (int r = 1; r < mpi.size(); ++r) {
    const auto i = static_cast<std::size_t>(2 * r);
    if (all[i] != all[0]) config_ranks += " " + std::to_string(r);
    if (all[i + 1] != all[1]) build_ranks += " " + std::to_string(r);
  }
  std::string msg;
  if (!config_ranks.empty()) {
    msg += "the resolved config of rank(s)" + config_ranks +
           " differs from rank 0's: every rank must run the same experiment (same file, same "
           "--set overrides; compare with syncopt train ... --dry-run on each node)";
  }
  if (!build_ranks.empty()) {
    msg += std::string(msg.empty() ? "" : "; ") + "rank(s)" + build_ranks +
           " run another syncopt build than rank 0 (" + kBuildId +
           "): install the same binary on every node";
  }
  if (!msg.empty()) throw ConfigError(msg);
}

// Rank 0's text on every rank.
std::string broadcast_text(const std::string& text) {
  int n = static_cast<int>(text.size());
  SYNCOPT_CHECK_MPI(MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD));
  std::string out = text;
  out.resize(static_cast<std::size_t>(n));
  SYNCOPT_CHECK_MPI(MPI_Bcast(out.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD));
  return out;
}

// The config, the roles and the compute backend, read and checked on every
// rank; a problem on any rank (a file missing on one node) is agreed on, and
// reported once.
struct Job {
  syncopt::config::Config cfg;
  syncopt::layout::Roles roles;
  syncopt::train::Compute compute;
};

Job load_job(const TrainArgs& args, const syncopt::comm::MpiSession& mpi) {
  using namespace syncopt;
  Job job;
  comm::agree(MPI_COMM_WORLD, [&] {
    job.cfg = config::load(args.config_path, args.overrides);
    // The model fits its input (as data.name gives it) before anything
    // starts: a shape error is a config error of every rank, said once.
    (void)nn::model_graph(train::expected_model_spec(job.cfg));
    job.roles = layout::make_roles(job.cfg, mpi.size());
    job.compute = app::make_compute(job.cfg.compute, job.cfg.cluster.dead_after_s);
  });
  return job;
}

// `syncopt train runs/<name>/config.toml` repeats that run under a new name
// (<name>-2, ...); rank 0 picks it, so that every rank agrees. With --set
// run.resume=true it resumes that directory, where it is.
void name_the_run(const TrainArgs& args, const syncopt::comm::MpiSession& mpi,
                  syncopt::config::Config& cfg, syncopt::rundir::Invocation& inv) {
  using namespace syncopt;
  if (rundir::resume_in_place(cfg, args.config_path, args.overrides) && mpi.rank() == 0) {
    std::fprintf(stderr, "syncopt: resuming the run in %s (the directory of %s)\n",
                 (std::filesystem::path(cfg.run.dir) / cfg.run.name).string().c_str(),
                 args.config_path.c_str());
  }
  if (cfg.run.resume) return;
  std::string again;
  comm::agree(MPI_COMM_WORLD, [&] {
    if (mpi.rank() == 0) again = rundir::repeat_name(args.config_path, cfg.run.dir, cfg.run.name);
  });
  again = broadcast_text(again);
  if (again.empty()) return;
  inv.repeat_of = (std::filesystem::path(cfg.run.dir) / cfg.run.name).string();
  if (mpi.rank() == 0) {
    std::fprintf(stderr, "syncopt: repeating the run %s as run.name = \"%s\" (%s untouched)\n",
                 inv.repeat_of.c_str(), again.c_str(), inv.repeat_of.c_str());
  }
  cfg.run.name = again;
}

// The launcher words to put before the program in a command that starts the
// run again as this launch was started: mpirun's own line (options
// included) when it is this rank's parent, else `srun ... -n W` or `mpirun
// -np W`; empty in a world of one rank.
std::string launch_prefix(const std::string& program, int world) {
  using namespace syncopt;
  if (world == 1) return "";
  const std::string launcher = rundir::launcher_name(world);
  if (launcher == "srun") {
    const char* mpi = std::getenv("SLURM_MPI_TYPE");
    return std::string("srun") + (mpi != nullptr ? std::string(" --mpi=") + mpi : "") + " -n " +
           std::to_string(world);
  }
  std::vector<std::string> words = rundir::mpirun_words(program);
  // run.sh's and the SLURM scripts' per-launch variables: a new launch gets
  // its own, and a line run by hand has none to pass.
  for (std::size_t i = 0; i + 1 < words.size();) {
    if (words[i] == "-x" && words[i + 1].starts_with("SYNCOPT_")) {
      words.erase(words.begin() + static_cast<std::ptrdiff_t>(i),
                  words.begin() + static_cast<std::ptrdiff_t>(i + 2));
    } else {
      ++i;
    }
  }
  if (words.empty()) return "mpirun -np " + std::to_string(world);
  return shell_words(words);
}

// A stopped run says how to continue it: the run's own config.toml (which
// resumes that directory wherever it is), started the way this launch was.
void print_how_to_resume(const syncopt::rundir::Outcome& outcome,
                         const std::filesystem::path& run_dir, const TrainArgs& args, int world) {
  if (outcome.status() != syncopt::RunStatus::kStopped) return;
  const std::string program = args.argv.empty() ? "syncopt" : args.argv[0];
  const std::string prefix = launch_prefix(program, world);
  std::printf("stopped (%s) with a checkpoint: continue with %s%s\n", outcome.detail.c_str(),
              prefix.empty() ? "" : (prefix + " ").c_str(),
              shell_words({program, "train", (run_dir / "config.toml").string(), "--set",
                           "run.resume=true"})
                  .c_str());
}

// A world of one rank: the local trainer, and its summary.
int train_alone(const TrainArgs& args, const Job& job, const syncopt::rundir::Invocation& inv) {
  using namespace syncopt;
  // A config that asks for parameter servers and workers started without
  // MPI would train something else (one process, no backups, no
  // staleness) under the experiment's name: refused, with what to run.
  if (job.cfg.train.mode != config::Mode::kLocal) {
    throw UsageError("train.mode = \"" + std::string(config::mode_name(job.cfg.train.mode)) +
                     "\" needs several MPI ranks (parameter servers and workers), but this "
                     "process runs alone (no mpirun or srun). Start it under MPI:\n  " +
                     mpi_line(args, job.cfg) +
                     "\nor scripts/run.sh CONFIG, or srun/sbatch under SLURM "
                     "(scripts/slurm/train.sbatch). To train in this one process instead, add "
                     "--set train.mode=local.");
  }
  const train::LocalResult r = train::run_local(job.cfg, job.compute, args.quiet, inv);
  std::printf("\nsummary: %lld steps, %lld examples in %.1fs (%.0f examples/s training)\n",
              static_cast<long long>(r.steps), static_cast<long long>(r.examples), r.wall_s,
              r.examples_per_s);
  if (r.evaluated) {
    std::printf("         test accuracy %.2f%% (EMA %.2f%%), test loss %.4f\n",
                100.0 * r.final_eval.accuracy, 100.0 * r.final_eval_ema.accuracy,
                r.final_eval.loss);
  } else {
    std::printf("         test accuracy: not evaluated (the run did not complete)\n");
  }
  std::printf("         run directory: %s\n", r.run_dir.string().c_str());
  print_how_to_resume(r.outcome, r.run_dir, args, 1);
  return static_cast<int>(r.outcome.exit_code);
}

// Every rank in its role; rank 0 prints the report.
int train_distributed(const TrainArgs& args, const Job& job, const syncopt::rundir::Invocation& inv,
                      syncopt::comm::MpiSession& mpi) {
  using namespace syncopt;
  const train::DistributedResult r = train::run_distributed(job.cfg, job.compute, args.quiet, inv);
  // A peer stopped from now on is ended at exit (the exit window).
  mpi.watch_exit(r.peers, job.cfg.cluster.dead_after_s);
  if (r.peer_lost && r.dead_ranks.empty()) {
    // A rank of the job died (a shard said so): MPI_Finalize would wait for it.
    mpi.abandon();
  }
  if (!r.dead_ranks.empty()) {
    // Everything is written. Stopped or hung peers on this node are ended
    // (mpirun would wait for them forever), and MPI_Finalize, which would
    // wait for them too, is skipped.
    const auto elsewhere = comm::fence(r.peers, mpi.rank(), r.dead_ranks);
    for (const int rank : elsewhere) {
      spdlog::warn("{} is silent on another node: end it there (or let mpirun end the job)",
                   comm::describe_rank(r.peers, rank));
    }
    mpi.abandon();
  }
  if (mpi.rank() == 0) {
    std::printf("\n%s", r.report.c_str());
    std::printf("run directory: %s  (syncopt report %s; scripts/plot.py %s)\n",
                r.run_dir.string().c_str(), r.run_dir.string().c_str(), r.run_dir.string().c_str());
    if (const std::string note = comm::flight::ending_note(); !note.empty()) {
      std::printf("%s\n", note.c_str());
    }
    print_how_to_resume(r.outcome, r.run_dir, args, mpi.size());
  }
  return static_cast<int>(r.outcome.exit_code);
}

}  // namespace

int run_train(const TrainArgs& args, syncopt::comm::MpiSession& mpi) {
  using namespace syncopt;
  Job job = load_job(args, mpi);
  rundir::Invocation inv = make_invocation(args.argv, args.config_path, args.overrides);
  name_the_run(args, mpi, job.cfg, inv);
  // One experiment, one build: every rank's resolved config and binary
  // must be rank 0's (a different model on one rank would corrupt memory).
  comm::agree(MPI_COMM_WORLD, [&] { check_same_job(job.cfg, mpi); });
  const bool local = mpi.size() == 1;
  setup_logging(mpi.rank(), local ? "local" : job.roles.role_name(mpi.rank()), args.verbose,
                args.quiet);
  if (args.dry_run) {
    print_dry_run(args, job.cfg, job.roles, job.compute, mpi);
    return 0;
  }
  // A run directory that exists is refused now, not after the data are
  // loaded (rank 0 owns it; the others agree).
  comm::agree(MPI_COMM_WORLD, [&] {
    if (mpi.rank() == 0) rundir::check_new_run_dir(job.cfg);
  });
  return local ? train_alone(args, job, inv) : train_distributed(args, job, inv, mpi);
}

CLI::Option* add_set_option(CLI::App* cmd, std::vector<std::string>& overrides,
                            const std::string& help) {
  // One value per --set, wherever it stands: a vector option would
  // otherwise swallow the config path that follows it.
  return cmd->add_option("--set", overrides, help)->type_name("KEY=VALUE")->allow_extra_args(false);
}

CLI::App* add_train_command(CLI::App& app, TrainArgs& targs) {
  auto* train = app.add_subcommand(
      "train", "Train a model as described by a TOML config (see the key reference below).");
  train
      ->add_option("config", targs.config_path,
                   "TOML experiment file, e.g. configs/fmnist-local.toml")
      ->required();
  add_set_option(train, targs.overrides,
                 "Override one key, section.key=value (repeatable), e.g. --set train.batch=64");
  train->add_flag("--dry-run", targs.dry_run,
                  "Validate the config, print it resolved and the role of every rank, then exit");
  train->add_flag("-q,--quiet", targs.quiet, "Only warnings and the final summary");
  train->add_flag("-v,--verbose", targs.verbose, "Debug logging on every rank");
  train->footer("Config keys (TOML sections; every key has a default):\n" +
                config::key_reference() + "\n" + kExitCodes);
  return train;
}

}  // namespace syncopt::app
