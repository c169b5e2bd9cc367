// Distributed training in phases (see distributed.hpp, docs/design.md §2-§4, §8, §10):
//   1. inputs   every rank loads the data; all agree that it worked
//   2. compute  workers and the evaluating rank build their network
//   3. outputs  rank 0 opens the run directory; the eval writer its log
//   4. resume   every rank reads its part of the latest checkpoint (if resuming)
//   5. roles    from a common start, each rank runs its role's loop, watched
//               by its peers and watching them (one comm::Watch per rank)
//   6. end      point to point, bounded: final parameters, evaluation, records, summary
// A failure at any point ends the job with its outcome recorded
// (rundir/ending.hpp): rank 0 records it; when rank 0 itself is silent,
// another rank does; a rank's own error is announced to the ranks that
// watch it, so that they end at once with its exit code.
#include "train/distributed.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/parts.hpp"
#include "comm/agree.hpp"
#include "comm/flight.hpp"
#include "comm/mpi.hpp"
#include "comm/poll.hpp"
#include "comm/protocol.hpp"
#include "comm/requests.hpp"
#include "comm/shard_watch.hpp"
#include "common/clock.hpp"
#include "common/error.hpp"
#include "common/signals.hpp"
#include "data/dataset.hpp"
#include "layout/placement.hpp"
#include "layout/roles.hpp"
#include "metrics/analysis.hpp"
#include "metrics/records.hpp"
#include "metrics/run_board.hpp"
#include "metrics/step_record.hpp"
#include "nn/cpu_peak.hpp"
#include "nn/graph.hpp"
#include "optim/optimizer.hpp"
#include "ps/shard.hpp"
#include "rundir/ending.hpp"
#include "rundir/partition.hpp"
#include "train/allreduce.hpp"
#include "train/evaluation.hpp"
#include "train/evaluator.hpp"
#include "train/inputs.hpp"
#include "train/memory_check.hpp"
#include "train/reshape.hpp"
#include "worker/straggler.hpp"
#include "worker/worker.hpp"

namespace syncopt::train {

namespace {

using comm::Kind;
using layout::Role;

// What a rank knows once the job is set up; filled in phase by phase.
struct Job {
  Job(const config::Config& c, const Compute& comp, const rundir::Invocation& i)
      : cfg(c), compute(comp), inv(i) {}
  const config::Config& cfg;
  const Compute& compute;
  const rundir::Invocation& inv;
  std::string launch_id;                    // rank 0's, the same on every rank
  std::optional<rundir::OpenedRun> opened;  // rank 0: the run directory, locked
  rundir::RunJournal journal;               // rank 0: run.json
  bool training = false;                    // the role loops have started
  int rank = 0, world = 1;
  // One duplicate per concern: gradients and parameters, control, heartbeats.
  comm::Communicator data_comm, ctrl_comm, live_comm;
  std::vector<comm::Peer> peers;
  layout::Roles roles;
  Role role = Role::kWorker;
  int eval_writer = 0;
  data::TrainTest data;
  std::unique_ptr<worker::StragglerModel> stragglers;
  nn::ModelSpec spec;
  nn::ParamLayout param_layout;
  std::vector<float> init;
  std::vector<layout::Group> groups;  // the model's layers with parameters, forward order
  std::vector<layout::Slice> slices;
  // Per shard: the buckets of the exchange (one without exchange.pipeline).
  std::vector<std::vector<layout::Slice>> buckets;
  layout::Plan plan;
  std::unique_ptr<nn::Backend> backend;
  std::unique_ptr<nn::Network> net;
  std::filesystem::path run_dir;
  std::unique_ptr<metrics::StepLog> steps;  // rank 0: steps.jsonl; other shards: in memory
  std::unique_ptr<metrics::JsonlWriter> eval_file;
  std::unique_ptr<EvalLog> eval;
  std::optional<checkpoint::Checkpoint> resumed;  // this rank's part (and shard 0's)
  RunClock clock;
  std::unique_ptr<comm::Watch> watch;  // from the roles' start to the end
  // Rank 0: its mark in the run directory while the roles run, which tells
  // a rank cut off from it on the network that it still runs (partition.hpp).
  std::unique_ptr<rundir::AliveMark> alive_mark;
  // Every rank of this node has a core of its own (ranks x compute.threads
  // <= hardware threads): the exchange's waits spin instead of sleeping.
  bool own_core = false;
  // Rank 0: this host's one-core GEMM peak, measured at the start
  // (nn/cpu_peak.hpp), for summary.json's "how far from the limit".
  nn::CpuPeak peak;

  bool ps_mode() const { return roles.shards > 0; }
  MPI_Comm ctrl() const { return ctrl_comm.get(); }
  std::string my_part() const {
    switch (roles.role_of(rank)) {
      case Role::kShard:
        return checkpoint::shard_part(rank);
      case Role::kEvaluator:
        return checkpoint::kEvaluatorPart;
      case Role::kWorker:
        return checkpoint::worker_part(roles.worker_of(rank));
    }
    return "";
  }
  // The part that holds the run's record offsets (steps.jsonl, and
  // eval.jsonl when no evaluator writes it).
  std::string records_part() const {
    return ps_mode() ? checkpoint::shard_part(0) : checkpoint::kRunPart;
  }
  const checkpoint::State* my_state() const {
    return resumed && resumed->has_part(my_part()) ? &resumed->part(my_part()) : nullptr;
  }
};

// What a rank's role leaves for the end phase.
struct RoleOutcome {
  std::vector<float> theta, ema;  // a shard's slice; allreduce: rank 0's full vector
  std::uint64_t examples = 0;
  double wall_s = 0.0;
  std::uint64_t steps = 0;
  rundir::Outcome outcome;
  nlohmann::json lost_workers = nlohmann::json::array();
  std::vector<int> dead_ranks;
  std::vector<int> ended_ranks;  // ended on an error of their own: nothing more comes from them
  bool peer_lost = false;        // told that some rank died (MPI_Finalize would wait for it)
};

// 1. Every rank loads the data (workers train on it, the evaluator tests on
//    it) and the straggler model; every rank agrees that it worked.
Holds memory_role(const Job& job) {
  if (!job.ps_mode()) return Holds::kTrainer;
  if (job.role == Role::kWorker) return Holds::kWorker;
  return job.rank == job.eval_writer ? Holds::kEvaluator : Holds::kShard;
}

void load_inputs(Job& job) {
  const auto& cfg = job.cfg;
  const int ranks_here = comm::Communicator(job.ctrl(), comm::Communicator::kNodeLocal).size();
  comm::agree(job.ctrl(), [&] {
    // Before anything is allocated: what this rank will hold.
    check_memory(cfg, memory_role(job), ranks_here);
  });
  comm::agree(job.ctrl(), [&] {
    job.data = data::load(load_options(cfg));
    if (job.data.train.count < std::max<std::int64_t>(cfg.train.batch, job.roles.workers)) {
      throw ConfigError(
          "the " + std::to_string(job.data.train.count) +
          " training examples cannot feed train.batch = " + std::to_string(cfg.train.batch) +
          " on each of " + std::to_string(job.roles.workers) +
          " workers (each needs its own shard of at least one example); raise "
          "data.limit_train or use fewer ranks");
    }
    job.stragglers = std::make_unique<worker::StragglerModel>(cfg.stragglers);
    if (job.ps_mode() && job.roles.evaluator_rank < 0 && job.roles.shards > 1 &&
        (cfg.eval.every_steps > 0 || cfg.eval.every_s > 0.0)) {
      throw ConfigError(
          "eval.every_steps/eval.every_s with cluster.ps = " + std::to_string(job.roles.shards) +
          " needs an evaluator rank: set cluster.evaluator = true (and one more "
          "rank)");
    }
  });
  job.spec = model_spec(cfg, job.data.train);
  job.param_layout = nn::param_layout(job.spec);
  job.init.resize(job.param_layout.count);
  nn::init_params(job.spec, job.param_layout, job.init.data(), cfg.run.seed);
  if (job.ps_mode()) {
    // Whole layers per shard, balanced by bytes (docs/design.md §2), and the
    // buckets of the exchange (§4); a model with fewer layers than shards is
    // a config error of every rank.
    comm::agree(job.ctrl(), [&] {
      job.groups = layout_groups(job.spec);
      job.slices = layout::balanced_slices(job.groups, job.roles.shards);
      for (const auto& slice : job.slices) {
        job.buckets.push_back(layout::make_buckets(
            job.groups, slice, cfg.exchange.pipeline ? cfg.exchange.bucket_bytes : 0));
      }
    });
  }
  job.plan = layout::make_plan(cfg, job.roles, job.data.train.count);
}

// 2. Workers need a training network, the eval writer a test one.
void build_compute(Job& job) {
  const int local_rank = comm::node_local_rank(job.ctrl());  // picks the GPU
  {
    const comm::Communicator node(job.ctrl(), comm::Communicator::kNodeLocal);
    const auto threads = static_cast<long>(std::max<std::int64_t>(1, job.cfg.compute.threads));
    const auto cores = static_cast<long>(std::thread::hardware_concurrency());
    job.own_core = cores > 0 && node.size() * threads <= cores;
  }
  comm::agree(job.ctrl(), [&] {
    if (job.role != Role::kWorker && job.rank != job.eval_writer) return;
    job.backend = job.compute.make_backend(local_rank);
    const auto max_batch = job.rank == job.eval_writer
                               ? std::max(job.cfg.train.batch, job.cfg.eval.batch)
                               : job.cfg.train.batch;
    job.net = job.backend->make_network(job.spec, static_cast<int>(max_batch));
  });
}

// Rank 0 measures its host's one-core peak (nn/cpu_peak.hpp) while the
// other ranks wait asleep: ranks spinning in MPI on the same cores, or on
// their hyperthread siblings, would slow the GEMMs it times (5 ranks on 2
// cores: 28 GFLOP/s where 74-88 is what the core does).
void measure_peak(Job& job) {
  if (job.rank == 0) job.peak = nn::measure_one_core_peak();
  MPI_Request req = MPI_REQUEST_NULL;
  SYNCOPT_CHECK_MPI(MPI_Ibarrier(job.ctrl(), &req));
  const double limit_s = job.cfg.cluster.dead_after_s;
  const auto t0 = std::chrono::steady_clock::now();
  for (int done = 0;;) {
    SYNCOPT_CHECK_MPI(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    if (done != 0) return;
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > limit_s) {
      throw UnavailableError("rank 0 did not finish measuring its one-core peak in " +
                             std::to_string(static_cast<int>(limit_s)) +
                             "s (cluster.dead_after_s): it is stopped or gone");
    }
    comm::sleep_s(0.002);
  }
}

// This launch, for a checkpoint of another shape (train/reshape.hpp).
Shape resume_shape(const Job& job) {
  Shape shape;
  shape.roles = &job.roles;
  shape.groups = job.groups;
  shape.batch = job.cfg.train.batch;
  shape.train_count = job.data.train.count;
  shape.seed = job.cfg.run.seed;
  return shape;
}

// Where the records end in the checkpoint resumed: rank 0 holds steps.jsonl,
// the eval writer eval.jsonl. Without an offset (a part the checkpoint
// lacks), the file is kept whole.
std::optional<std::uint64_t> record_offset(const checkpoint::Checkpoint& ck,
                                           const std::string& part, const char* field) {
  if (!ck.has_part(part) || !ck.part(part).has(field)) return std::nullopt;
  return ck.part(part).get<std::uint64_t>(field);
}

// 4. Every rank of a resumed run reads its parts of the latest checkpoint,
//    cut again for this launch when another shape saved it (reshape.hpp).
void read_checkpoint(Job& job) {
  std::vector<std::string> parts{job.records_part(), job.my_part()};
  if (!job.ps_mode()) parts.push_back(checkpoint::rank_part(job.rank));
  if (job.rank == job.eval_writer && job.roles.evaluator_rank >= 0) {
    parts.push_back(checkpoint::kEvaluatorPart);
  }
  // A part a rank's role has no state for (a worker lost before the save)
  // is not required; a checkpoint of another shape is re-cut for this one.
  const RunClock loading;
  job.resumed = load_for_shape(job.run_dir, resume_shape(job), parts);
  if (const auto saved = saved_layout(job.resumed->manifest);
      job.rank == 0 && other_shape(saved, job.roles)) {
    const auto now = rundir::describe_layout(job.roles);
    const double took = loading.now();
    job.journal.note(
        "reshape", {{"step", job.resumed->step}, {"from", saved}, {"to", now}, {"seconds", took}});
    spdlog::info("resuming the checkpoint at step {} of {} on {} (read and cut in {:.3f}s)",
                 job.resumed->step, rundir::layout_words(saved), rundir::layout_words(now), took);
  }
  if (job.resumed->step > job.plan.total_steps) {
    throw ConfigError("the run reached step " + std::to_string(job.resumed->step) +
                      " (its latest checkpoint), past this launch's " +
                      std::to_string(job.plan.total_steps) +
                      " steps: to extend it, raise train.steps (or train.epochs)");
  }
  // The run goes on: config.toml describes it as it is now (its place, its length).
  if (job.rank == 0) rundir::rewrite_config(job.cfg, job.run_dir);
}

// 3. Rank 0 opens the run directory; the others wait for it, then every
//    rank of a resumed run reads its part of the latest checkpoint (4.),
//    and the writers of records open them (cut back to the checkpoint).
void open_outputs(Job& job) {
  stops_at_step_boundaries();  // from here a stop is a checkpoint (docs/design.md §10)
  const auto& cfg = job.cfg;
  job.run_dir = std::filesystem::path(cfg.run.dir) / cfg.run.name;
  comm::agree(job.ctrl(), [&] {
    if (job.rank != 0) return;
    job.opened = rundir::open_run_dir(cfg, rundir::this_process(job.launch_id));
    rundir::Invocation inv = job.inv;
    inv.launch_id = job.launch_id;
    job.journal =
        rundir::RunJournal(job.run_dir, cfg.run.name, inv, {job.peers, job.roles}, cfg.run.resume);
    if (cfg.run.resume) {
      const auto changed = rundir::check_resume(cfg, job.run_dir, job.world, job.launch_id);
      if (!changed.empty()) {
        job.journal.note("changed", changed);
        for (const auto& c : changed) spdlog::info("resumed with {}", c);
      }
    }
  });
  comm::agree(job.ctrl(), [&] {
    if (cfg.run.resume) read_checkpoint(job);
  });
  comm::agree(job.ctrl(), [&] {
    // TensorBoard (tb/, see run_board.hpp): rank 0 writes the step records
    // to a file tagged "steps", and its evaluations there too when it is the
    // eval writer; an evaluator rank writes its own file, tagged "eval", in
    // the same directory.
    std::shared_ptr<metrics::RunBoard> board;
    if (job.rank == 0) {
      const auto offset = job.resumed
                              ? record_offset(*job.resumed, job.records_part(), "steps_bytes")
                              : std::nullopt;
      job.steps = std::make_unique<metrics::StepLog>(
          offset        ? metrics::StepLog::resume_file(job.run_dir / "steps.jsonl", *offset)
          : job.resumed ? metrics::StepLog::resume_file(
                              job.run_dir / "steps.jsonl",
                              std::filesystem::file_size(job.run_dir / "steps.jsonl"))
                        : metrics::StepLog::to_file(job.run_dir / "steps.jsonl"));
      // Old shards' records that no shard of this shape holds (a reshape to fewer).
      if (job.resumed && job.resumed->has_part(job.records_part()) &&
          job.resumed->part(job.records_part()).has("records_to_append")) {
        job.steps->append_lines(
            job.resumed->part(job.records_part()).get<std::string>("records_to_append"));
      }
      board = metrics::open_run_board(cfg.run, job.run_dir, "steps", job.clock);
      if (board) board->describe_run(cfg, rundir::describe_invocation(job.inv));
      if (board && !job.buckets.empty()) {
        std::vector<std::string> layers;
        for (const auto& b : job.buckets[0]) layers.push_back(layout::group_span(job.groups, b));
        board->set_bucket_layers(std::move(layers));
      }
      job.steps->set_board(board);
    }
    if (job.rank == job.eval_writer) {
      const std::string part =
          job.roles.evaluator_rank >= 0 ? checkpoint::kEvaluatorPart : job.records_part();
      const auto path = job.run_dir / "eval.jsonl";
      const auto offset =
          job.resumed ? record_offset(*job.resumed, part, "eval_bytes") : std::nullopt;
      job.eval_file = std::make_unique<metrics::JsonlWriter>(
          offset        ? metrics::JsonlWriter::resume_at(path, *offset)
          : job.resumed ? metrics::JsonlWriter::resume_at(path, std::filesystem::file_size(path))
                        : metrics::JsonlWriter(path));
      job.eval = std::make_unique<EvalLog>(*job.net, job.data.test, *job.eval_file,
                                           job.plan.train_count, cfg.optim.ema > 0.0, job.clock);
      job.eval->set_batch_norm_set(job.data.train, static_cast<int>(cfg.train.batch),
                                   static_cast<int>(cfg.eval.bn_batches), cfg.run.seed);
      job.eval->set_board(
          job.rank == 0 ? board : metrics::open_run_board(cfg.run, job.run_dir, "eval", job.clock));
    }
  });
  if (job.rank != 0 && job.role == Role::kShard) {
    job.steps = std::make_unique<metrics::StepLog>(metrics::StepLog::in_memory());
  }
  if (job.rank == 0) {
    spdlog::info("run directory: {}", job.run_dir.string());
    spdlog::info("mode {}: {} parameters, {} updates of {} examples ({:.2f} epochs)",
                 config::mode_name(job.roles.mode), job.param_layout.count, job.plan.total_steps,
                 job.plan.examples_per_update, job.plan.total_epochs);
    if (job.resumed) spdlog::info("resuming from the checkpoint at step {}", job.resumed->step);
  }
}

// An end-phase wait that ran out: what this rank was waiting for.
void end_deadline(const std::string& what, double limit_s) {
  (void)comm::flight::dump("end of the run: " + what + " within " +
                           std::to_string(static_cast<int>(limit_s)) + " s");
}

// A shard whose loop is over (every worker and the evaluator said goodbye
// or was found dead) tells them so, and whom it found dead (STOP notice).
void release_watchers(Job& job, const ps::ShardResult& r) {
  for (const int rank : job.watch->beat_to()) {
    if (rank < job.roles.shards || !job.watch->alive(rank)) continue;
    job.watch->notify(rank, Kind::kStop, static_cast<std::uint32_t>(r.code), 0, r.dead_ranks);
  }
  (void)job.watch->flush(1.0);
}

// A worker or the evaluator, its part done, waits until every shard's part
// is over too (its STOP notice) or the shard is found dead: only then does it
// know whether some rank of the job died, which MPI_Finalize would wait for
// (it then skips it). Returns whether one did, or it cannot tell.
bool wait_for_release(Job& job) {
  std::vector<int> waiting;
  for (int s = 0; s < job.roles.shards; ++s) {
    if (job.watch->alive(s)) waiting.push_back(s);
  }
  bool lost = false;
  const RunClock waited;
  comm::IdleBackoff backoff;
  const auto done = [&](int rank) { std::erase(waiting, rank); };
  while (!waiting.empty()) {
    for (const int r : job.watch->poll(job.clock.now())) {
      lost = true;
      done(r);
    }
    for (const auto& n : job.watch->notices()) {
      if (n.kind != Kind::kStop && n.kind != Kind::kEnding) continue;
      lost = lost || n.kind == Kind::kEnding || !n.ranks.empty();
      done(n.from);
    }
    if (waited.now() > job.cfg.cluster.dead_after_s + 5.0) {
      end_deadline("no shard said its part was over", job.cfg.cluster.dead_after_s + 5.0);
      return true;
    }
    backoff.idle(0.01);
  }
  return lost;
}

RoleOutcome run_shard_role(Job& job, metrics::Progress& progress) {
  ps::ShardSetup st;
  st.cfg = &job.cfg;
  st.roles = &job.roles;
  st.plan = &job.plan;
  st.peers = &job.peers;
  st.shard = job.rank;
  st.slice = job.slices[static_cast<std::size_t>(job.rank)];
  st.buckets = job.buckets[static_cast<std::size_t>(job.rank)];
  st.initial = job.init.data() + st.slice.offset;
  st.data_comm = job.data_comm.get();
  st.ctrl_comm = job.ctrl();
  st.live_comm = job.live_comm.get();
  st.watch = job.watch.get();
  st.clock = &job.clock;
  st.own_core = job.own_core;
  st.steps_log = job.steps.get();
  st.eval_file = job.rank == 0 && job.roles.evaluator_rank < 0 ? job.eval_file.get() : nullptr;
  st.run_dir = job.run_dir;
  if (job.rank == 0) {
    st.checkpoint_stamp = rundir::checkpoint_stamp(job.cfg, rundir::describe_layout(job.roles));
  }
  st.resume = job.my_state();
  if (job.rank == 0) {
    st.on_update = [&](std::uint64_t step, std::uint64_t ex, float loss) {
      const double now = job.clock.now();
      progress.update(static_cast<std::int64_t>(step),
                      static_cast<double>(ex) / job.plan.train_count, loss,
                      static_cast<double>(ex) / std::max(1e-9, now), now);
    };
  }
  EvalTimer timer(job.cfg.eval);
  if (job.rank == 0 && job.roles.evaluator_rank < 0 && timer.enabled()) {
    // One shard, no evaluator: evaluate here, stalling this step (logged).
    st.inline_eval = [&](std::uint64_t step, std::uint64_t ex, const float* theta,
                         const float* ema) {
      if (!timer.due(step, job.clock.now())) return;
      const EvalPoint p = job.eval->run(step, ex, theta, ema);
      timer.mark(p.wall_s);
      progress.note(job.eval->describe(p) + " (stalled the shard)");
    };
  }
  ps::Shard shard(st);
  ps::ShardResult r = shard.run();
  release_watchers(job, r);
  RoleOutcome out;
  out.theta = std::move(r.theta);
  out.ema = std::move(r.ema);
  out.examples = r.examples;
  out.wall_s = job.clock.now();
  out.steps = r.steps;
  out.outcome = rundir::Outcome::from_code(r.code, r.detail);
  out.outcome.reported_by = rundir::rank_json(job.peers, job.roles, r.reported_by);
  out.lost_workers = r.lost_workers;
  out.dead_ranks = r.dead_ranks;
  out.ended_ranks = r.ended_ranks;
  return out;
}

RoleOutcome run_worker_role(Job& job) {
  worker::WorkerSetup ws;
  ws.cfg = &job.cfg;
  ws.roles = &job.roles;
  ws.peers = &job.peers;
  ws.worker = job.roles.worker_of(job.rank);
  ws.slices = job.slices;
  ws.buckets = job.buckets;
  ws.pipeline = job.cfg.exchange.pipeline;
  ws.own_core = job.own_core;
  ws.param_count = job.param_layout.count;
  ws.net = job.net.get();
  ws.train = &job.data.train;
  ws.stragglers = job.stragglers.get();
  const nn::Graph graph = nn::model_graph(job.spec);
  ws.group_shares = nn::group_flops_shares(graph);
  for (const auto& g : graph.groups) ws.group_offsets.push_back(g.offset);
  ws.data_comm = job.data_comm.get();
  ws.live_comm = job.live_comm.get();
  ws.watch = job.watch.get();
  ws.clock = &job.clock;
  ws.run_dir = job.run_dir;
  ws.resume = job.my_state();
  worker::Worker w(ws);
  const auto wr = w.run();
  spdlog::debug("worker {}: {} gradients, compute {:.2f}s, delay {:.2f}s, waiting {:.2f}s",
                ws.worker, wr.gradients, wr.compute_s, wr.delay_s, wr.wait_s);
  RoleOutcome out;
  out.wall_s = job.clock.now();
  out.outcome = rundir::Outcome::from_code(wr.code);
  out.peer_lost = wait_for_release(job) || wr.peer_lost;
  return out;
}

RoleOutcome run_evaluator_role(Job& job) {
  EvaluatorSetup st;
  st.cfg = &job.cfg;
  st.roles = &job.roles;
  st.plan = &job.plan;
  st.peers = &job.peers;
  st.slices = job.slices;
  st.param_count = job.param_layout.count;
  st.eval = job.eval.get();
  st.eval_file = job.eval_file.get();
  st.clock = &job.clock;
  st.ctrl_comm = job.ctrl();
  st.live_comm = job.live_comm.get();
  st.watch = job.watch.get();
  st.run_dir = job.run_dir;
  st.resume = job.my_state();
  RoleOutcome out;
  const EvaluatorResult r = run_evaluator(st);
  out.outcome = rundir::Outcome::from_code(r.code);
  out.peer_lost = wait_for_release(job) || r.peer_lost;
  out.wall_s = job.clock.now();
  return out;
}

RoleOutcome run_allreduce_role(Job& job, metrics::Progress& progress) {
  const auto reducer = job.compute.make_reducer(job.data_comm.get());
  const auto replica =
      job.compute.make_replica(*job.net, job.init.data(), job.param_layout.count,
                               {optim::optimizer_options(job.cfg.optim), job.cfg.optim.ema});
  AllreduceSetup st;
  st.cfg = &job.cfg;
  st.roles = &job.roles;
  st.plan = &job.plan;
  st.rank = job.rank;
  st.replica = replica.get();
  st.train = &job.data.train;
  st.stragglers = job.stragglers.get();
  st.reducer = reducer.get();
  st.comm = job.data_comm.get();
  st.watch = job.watch.get();
  st.peers = &job.peers;
  st.clock = &job.clock;
  st.run_dir = job.run_dir;
  st.steps_log = job.steps.get();
  st.eval_file = job.eval_file.get();
  st.eval = job.eval.get();
  st.progress = &progress;
  AllreduceResult r = run_allreduce(st);
  RoleOutcome out;
  out.theta = std::move(r.theta);
  out.ema = std::move(r.ema);
  out.examples = r.examples;
  out.wall_s = job.clock.now();
  out.steps = r.steps;
  if (r.stop_signal != 0) out.outcome = rundir::Outcome::stopped(r.stop_signal, r.steps);
  if (!r.diverged.empty())
    out.outcome = rundir::Outcome::from_code(ExitCode::kInternal, r.diverged);
  if (r.failed_code != ExitCode::kOk) {
    out.outcome = rundir::Outcome::from_code(r.failed_code, r.failed);
    out.outcome.reported_by = rundir::rank_json(job.peers, job.roles, r.reported_by);
    out.lost_workers = r.lost_workers;
    out.dead_ranks = r.lost;
  }
  return out;
}

// Who watches whom (docs/design.md §10). With parameter servers: a shard
// watches, and beats to, every other rank; a worker and the evaluator the
// shards. allreduce: rank 0 watches every rank, every rank watches rank 0.
std::unique_ptr<comm::Watch> make_watch(const Job& job) {
  std::vector<int> peers;
  if (job.ps_mode()) {
    for (int r = 0; r < job.world; ++r) {
      const bool shard = r < job.roles.shards;
      if (r != job.rank && (job.role == Role::kShard || shard)) peers.push_back(r);
    }
  } else if (job.rank == 0) {
    for (int r = 1; r < job.world; ++r) peers.push_back(r);
  } else {
    peers.push_back(0);
  }
  return std::make_unique<comm::Watch>(job.live_comm.get(), job.rank, peers, peers,
                                       job.cfg.cluster.dead_after_s, job.clock.now());
}

// "worker 2 (rank 3)", "shard 0 (rank 0)", "evaluator (rank 1)".
std::string rank_role(const layout::Roles& roles, int rank) {
  const std::string r = " (rank " + std::to_string(rank) + ")";
  switch (roles.role_of(rank)) {
    case Role::kShard:
      return "shard " + std::to_string(rank) + r;
    case Role::kEvaluator:
      return "evaluator" + r;
    case Role::kWorker:
      return "worker " + std::to_string(roles.worker_of(rank)) + r;
  }
  return "rank " + std::to_string(rank);
}

// The flight recorder of this rank, from the roles' start (comm/flight.hpp).
void start_flight(Job& job) {
  comm::flight::Setup fs;
  fs.run_dir = job.run_dir;
  fs.launch_id = job.launch_id;
  fs.rank = job.rank;
  fs.role = rank_role(job.roles, job.rank);
  fs.events = static_cast<std::size_t>(job.cfg.run.flight_events);
  const layout::Roles* roles = &job.roles;
  fs.name_of = [roles](int rank) { return rank_role(*roles, rank); };
  const RunClock* clock = &job.clock;
  fs.now = [clock] { return clock->now(); };
  comm::flight::start(std::move(fs));
}

// 5. The role loops, from a common start (a resumed run continues its time axis).
RoleOutcome run_role(Job& job, bool quiet) {
  SYNCOPT_CHECK_MPI(MPI_Barrier(job.ctrl()));
  const auto* s0 =
      job.resumed && job.resumed->has_part("shard0") ? &job.resumed->part("shard0") : nullptr;
  job.clock.restart(s0 != nullptr ? s0->get<double>("wall_s") : 0.0);
  job.watch = make_watch(job);
  start_flight(job);
  if (job.rank == 0 && job.opened && job.world > 1)
    job.alive_mark = std::make_unique<rundir::AliveMark>(job.run_dir, job.launch_id);
  job.training = true;
  metrics::Progress progress(static_cast<std::int64_t>(job.plan.total_steps),
                             job.cfg.run.progress_every_steps, quiet || job.rank != 0,
                             job.cfg.run.progress);
  RoleOutcome out;
  if (!job.ps_mode()) {
    out = run_allreduce_role(job, progress);
  } else if (job.role == Role::kShard) {
    out = run_shard_role(job, progress);
  } else if (job.role == Role::kEvaluator) {
    out = run_evaluator_role(job);
  } else {
    out = run_worker_role(job);
  }
  progress.finish();
  return out;
}

// ---------------------------------------------------------------- failures

// Rank 0's text on every rank of `comm`.
std::string broadcast_text(MPI_Comm comm, const std::string& text) {
  int n = static_cast<int>(text.size());
  SYNCOPT_CHECK_MPI(MPI_Bcast(&n, 1, MPI_INT, 0, comm));
  std::string out = text;
  out.resize(static_cast<std::size_t>(n));
  SYNCOPT_CHECK_MPI(MPI_Bcast(out.data(), n, MPI_CHAR, 0, comm));
  return out;
}

// The ranks that watch this one learn that it ends the job with `code`
// (and which peers it found dead), so that they end at once.
void announce(Job& job, ExitCode code) {
  if (!job.watch) return;
  std::vector<int> dead;
  for (const int r : job.watch->peers()) {
    if (!job.watch->alive(r)) dead.push_back(r);
  }
  for (const int r : job.watch->beat_to()) {
    if (job.watch->alive(r)) {
      job.watch->notify(r, Kind::kEnding, static_cast<std::uint32_t>(code), comm::kNoCheckpoint,
                        dead);
    }
  }
  if (!job.watch->flush(2.0)) spdlog::warn("some ranks did not take the notice that this one ends");
}

// Rank 0: an attempt that failed. The outcome file and run.json record it;
// summary.json only when training had begun (it describes this launch then;
// an attempt that never trained leaves the run's last summary as it was).
void record_failure(Job& job, const rundir::Outcome& outcome) {
  std::optional<rundir::EndingClaim> claim;
  if (job.training && job.opened) {
    claim.emplace(rundir::EndingClaim::take(job.run_dir, job.launch_id,
                                            rundir::rank_json(job.peers, job.roles, 0)));
    if (!claim->held()) {
      spdlog::error("the outcome of this launch is recorded by another rank ({}); not by rank 0",
                    claim->holder().dump());
      return;
    }
  }
  rundir::write_outcome_file(outcome, job.launch_id, job.run_dir);
  // A write failed (a full disk, most often): more writes there would only
  // bury its message under theirs.
  if (outcome.exit_code == ExitCode::kIoError) return;
  job.journal.finish(outcome);
  if (job.training && job.opened) {
    if (job.steps) {
      try {
        job.steps->flush();
      } catch (const std::exception&) {
        // A full disk: the summary says what the records on disk say.
      }
    }
    rundir::write_summary_from_records(
        job.run_dir, outcome, {{"launch_id", job.launch_id}, {"run_id", job.journal.run_id()}});
  }
  job.alive_mark.reset();
}

// How long a rank that finds rank 0 silent watches rank 0's mark in the run
// directory (rewritten every rundir::kAliveEveryS) before it takes rank 0
// for gone.
constexpr double kPartitionWatchS = 1.5;

// Rank 0 is silent on the network but runs (its mark in the run directory
// changes): this rank's host is cut off from it. It leaves its report for
// rank 0, which records the outcome, and ends. Never returns.
[[noreturn]] void cut_off_from_rank0(Job& job) {
  nlohmann::json silent = nlohmann::json::array();
  for (const int r : job.watch->peers()) {
    if (!job.watch->alive(r)) silent.push_back(rundir::rank_json(job.peers, job.roles, r));
  }
  nlohmann::json report = rundir::rank_json(job.peers, job.roles, job.rank);
  report["silent"] = silent;
  report["wall_s"] = job.clock.now();
  rundir::report_cut_off(job.run_dir, job.launch_id, report);
  throw EndedByPeerError(ExitCode::kUnavailable,
                         "ends with exit 69: " + comm::describe_rank(job.peers, 0) +
                             " is silent on the network but still runs (its mark in " +
                             job.run_dir.string() + " changes): this host, " +
                             job.peers[static_cast<std::size_t>(job.rank)].host +
                             ", is cut off from it; rank 0 records the outcome");
}

// This rank cannot go on because rank 0, which records the run, is silent:
// one rank (the first to claim it) records the outcome in its place; every
// rank ends rank 0 if it is stopped on this node (mpirun would wait for it
// forever) and exits. Never returns.
[[noreturn]] void end_without_rank0(Job& job, const Error& e) {
  rundir::Outcome outcome = rundir::Outcome::from_code(ExitCode::kUnavailable, e.what());
  outcome.reported_by = rundir::rank_json(job.peers, job.roles, job.rank);
  announce(job, ExitCode::kUnavailable);
  if (rundir::rank0_running(job.run_dir, job.launch_id, kPartitionWatchS)) cut_off_from_rank0(job);
  const bool ender = rundir::end_in_place_of_rank0(
      {job.run_dir, job.launch_id, job.rank, &job.peers, &job.roles}, outcome);
  if (!ender) {
    // Let the rank that records the outcome finish before rank 0 goes: a
    // plain mpirun ends every rank once one is killed.
    const auto claim = job.run_dir / (".ending-" + job.launch_id);
    const RunClock waited;
    while (std::filesystem::exists(claim) && waited.now() < 5.0) comm::sleep_s(0.05);
  }
  std::vector<int> silent{0};
  for (const int r : job.watch->peers()) {
    if (r != 0 && !job.watch->alive(r)) silent.push_back(r);
  }
  for (const int r : comm::fence(job.peers, job.rank, silent)) {
    spdlog::warn(
        "{} is silent on another node: end it there (under srun, or a plain mpirun, the job "
        "step ends when this rank exits with an error)",
        comm::describe_rank(job.peers, r));
  }
  if (ender) {
    throw UnavailableError(std::string(e.what()) + " (this rank recorded the outcome in " +
                           (job.run_dir / "summary.json").string() + ")");
  }
  throw EndedByPeerError(ExitCode::kUnavailable,
                         "ends with exit 69: " + comm::describe_rank(job.peers, 0) +
                             " is silent; another rank records the outcome");
}

// ---------------------------------------------------------------- 6. the end

// Sends `text` to `to` (rank 0: another shard's records), waiting at most
// `limit_s` for it to be taken. Its own queue owns the copy sent: if rank 0
// is gone, the send is cancelled or its buffer kept until MPI_Finalize.
void send_text(const std::string& text, int to, MPI_Comm comm, double limit_s) {
  comm::SendQueue records(comm);
  records.send_text(text, to, comm::kTagRecords);
  if (records.drain(limit_s)) return;
  end_deadline("rank 0 did not take this shard's step records", limit_s);
  spdlog::error("the step records of this shard were not taken by rank 0 within {}s", limit_s);
}

// Whether `rank` died or ended on its own error: nothing more comes from it.
bool gone(const Job& job, const RoleOutcome& out, int rank) {
  return rank != job.rank &&
         (!job.watch->alive(rank) ||
          std::count(out.ended_ranks.begin(), out.ended_ranks.end(), rank) > 0 ||
          std::count(out.dead_ranks.begin(), out.dead_ranks.end(), rank) > 0);
}

// What the eval writer tells rank 0.
struct FinalEval {
  bool done = false;
  EvalResult theta, ema;
};

// The eval writer: every shard's final slices, the final evaluation (of a
// completed run), params.f32 and params_ema.f32.
FinalEval final_evaluation(Job& job, RoleOutcome& out, const rundir::Outcome& outcome,
                           double limit_s) {
  const std::size_t count = job.param_layout.count;
  std::vector<float> theta(count), ema(count);
  if (!job.ps_mode()) {
    theta = std::move(out.theta);
    ema = std::move(out.ema);
  } else {
    for (int s = 0; s < job.roles.shards; ++s) {
      if (s != job.rank && gone(job, out, s)) {
        // Said once already, by whoever found it gone.
        spdlog::info("shard {} is gone: no final parameters, no final evaluation", s);
        return {};
      }
    }
    comm::RecvSlots slots;
    for (int s = 0; s < job.roles.shards; ++s) {
      if (s == job.rank) continue;
      slots.add(s, comm::kTagFinal, job.ctrl(), 2 * job.slices[static_cast<std::size_t>(s)].count);
    }
    for (int i = 0; i < slots.size(); ++i) slots.post(i);
    if (job.role == Role::kShard) {
      const auto& sl = job.slices[static_cast<std::size_t>(job.rank)];
      std::copy(out.theta.begin(), out.theta.end(),
                theta.begin() + static_cast<std::ptrdiff_t>(sl.offset));
      std::copy(out.ema.begin(), out.ema.end(),
                ema.begin() + static_cast<std::ptrdiff_t>(sl.offset));
    }
    if (!slots.wait_all(limit_s)) {
      end_deadline("the final parameters of some shard did not arrive", limit_s);
      spdlog::error("the final parameters of some shard did not arrive: no final evaluation");
      return {};
    }
    for (int i = 0; i < slots.size(); ++i) {
      const int s = slots.source(i);
      const auto& sl = job.slices[static_cast<std::size_t>(s)];
      const auto& h = slots.message(i).header();
      if (s == 0) {  // shard 0's count of examples and end of training
        out.examples = h.examples;
        out.wall_s = h.compute_s;
      }
      const float* p = slots.message(i).payload();
      std::copy_n(p, sl.count, theta.begin() + static_cast<std::ptrdiff_t>(sl.offset));
      std::copy_n(p + sl.count, sl.count, ema.begin() + static_cast<std::ptrdiff_t>(sl.offset));
    }
  }
  FinalEval fe;
  if (outcome.status() == RunStatus::kCompleted) {
    const EvalPoint p =
        job.eval->run(job.plan.total_steps, out.examples, theta.data(), ema.data(), out.wall_s);
    fe = {true, p.theta, p.ema};
  }
  job.eval_file->flush();
  metrics::write_floats(job.run_dir / "params.f32", theta);
  metrics::write_floats(job.run_dir / "params_ema.f32", ema);
  return fe;
}

// How long rank 0 waits for the reports of ranks cut off from it
// (rundir/partition.hpp) before it records a run that lost ranks on other
// hosts: a cut-off rank reports kPartitionWatchS after it found rank 0
// silent, about when rank 0 found it silent.
constexpr double kReportWaitS = kPartitionWatchS + 1.5;

// Rank 0: what it records of a partition (rundir::describe_partition), when
// it lost ranks on other hosts that reported being cut off; else null.
nlohmann::json partition_of(const Job& job, const RoleOutcome& out) {
  const std::string own = job.peers[0].host;
  std::vector<std::string> lost_hosts, all_hosts;
  auto add_lost = [&](int r) {
    const std::string& h = job.peers[static_cast<std::size_t>(r)].host;
    if (h != own && std::find(lost_hosts.begin(), lost_hosts.end(), h) == lost_hosts.end())
      lost_hosts.push_back(h);
  };
  for (const int r : out.dead_ranks) add_lost(r);
  for (const auto& l : out.lost_workers) add_lost(l.value("rank", 0));
  if (lost_hosts.empty()) return nullptr;
  for (const auto& p : job.peers) all_hosts.push_back(p.host);
  const auto reports =
      rundir::cut_off_reports(job.run_dir, job.launch_id, lost_hosts, kReportWaitS);
  return rundir::describe_partition(own, lost_hosts, all_hosts, reports);
}

// What "how far from the limit" needs (metrics/limits.hpp): the model's
// FLOPs and parameters, each shard's slice, and rank 0's machine.
void put_limits_inputs(const Job& job, metrics::RunInfo& info) {
  info.flops_per_example = static_cast<double>(nn::model_graph(job.spec).flops);
  info.param_count = static_cast<std::int64_t>(job.param_layout.count);
  if (job.ps_mode()) {
    for (const auto& s : job.slices)
      info.shard_counts.push_back(static_cast<std::int64_t>(s.count));
  }
  info.machine = {{"host", job.peers.empty() ? std::string() : job.peers[0].host},
                  {"cpu", job.peak.cpu},
                  {"one_core_peak_gflops", job.peak.gflops},
                  {"peak_method", job.peak.method},
                  {"peak_measure_s", job.peak.seconds},
                  // 0: OpenMP's default, a thread per hardware thread
                  {"threads", job.cfg.compute.threads > 0
                                  ? job.cfg.compute.threads
                                  : static_cast<std::int64_t>(std::thread::hardware_concurrency())},
                  {"backend", config::to_string(job.cfg.compute.backend)}};
}

// Rank 0: the records of every shard, then summary.json, written last.
std::string write_outputs(Job& job, const RoleOutcome& out, const FinalEval& fe, double limit_s) {
  for (int s = 1; s < job.roles.shards; ++s) {
    if (gone(job, out, s)) continue;
    if (const auto text = comm::receive_text(s, comm::kTagRecords, job.ctrl(), limit_s)) {
      if (!text->empty()) job.steps->append_lines(*text);
    } else {
      end_deadline("the step records of shard " + std::to_string(s) + " did not arrive", limit_s);
      spdlog::error("the step records of shard {} did not arrive", s);
    }
  }
  job.steps->flush();
  metrics::RunInfo info;
  info.mode = job.roles.mode;
  info.n = job.roles.rule.n;
  info.b = job.roles.rule.backups;
  info.shards = job.roles.shards;
  info.workers = job.roles.workers;
  info.batch = job.cfg.train.batch;
  if (job.ps_mode()) info.wire = config::to_string(job.cfg.exchange.wire);
  info.wall_s = out.wall_s;
  info.examples = out.examples;
  info.epochs = static_cast<double>(out.examples) / job.plan.train_count;
  info.evaluated = fe.done;
  info.test_loss = fe.theta.loss;
  info.test_acc = fe.theta.accuracy;
  info.test_loss_ema = fe.ema.loss;
  info.test_acc_ema = fe.ema.accuracy;
  put_limits_inputs(job, info);
  for (const auto& shard : job.buckets) {
    auto& names = info.bucket_layers.emplace_back();
    for (const auto& b : shard) names.push_back(layout::group_span(job.groups, b));
  }
  rundir::Outcome outcome = out.outcome;
  if (outcome.reported_by.is_null())
    outcome.reported_by = rundir::rank_json(job.peers, job.roles, 0);
  const auto claim = rundir::EndingClaim::take(job.run_dir, job.launch_id,
                                               rundir::rank_json(job.peers, job.roles, 0));
  if (!claim.held()) {
    spdlog::error("the outcome of this launch is recorded by another rank ({}); not by rank 0",
                  claim.holder().dump());
    return "";
  }
  const nlohmann::json partition = partition_of(job, out);
  if (!partition.is_null() && outcome.status() != RunStatus::kCompleted)
    outcome.detail += " (" + partition["detail"].get<std::string>() + ")";
  nlohmann::json extra = outcome.to_json();
  extra["lost_workers"] = out.lost_workers;
  extra["launch_id"] = job.launch_id;
  extra["run_id"] = job.journal.run_id();
  if (!partition.is_null()) extra["partition"] = partition;
  job.journal.finish(outcome);
  if (!fe.done) {
    extra["final_eval"] = outcome.status() == RunStatus::kCompleted
                              ? "none: the evaluator was lost"
                              : "none: the run did not complete";
  }
  const auto an = metrics::write_summary(job.run_dir, info, extra);
  // Last: a launcher that sees this file may end the job (scripts/run.sh).
  rundir::write_outcome_file(outcome, job.launch_id, job.run_dir);
  rundir::remove_partition_files(job.run_dir, job.launch_id);
  return metrics::format_report(an, metrics::read_jsonl(job.run_dir / "eval.jsonl"));
}

// Rank 0, everything written: the ranks that watch it may end now (WRITTEN).
void tell_written(Job& job) {
  for (const int r : job.watch->beat_to()) {
    if (job.watch->alive(r)) job.watch->notify(r, Kind::kWritten, 0, 0);
  }
  (void)job.watch->flush(1.0);
}

// A rank other than 0 goes on to MPI_Finalize (or, a peer dead, exits
// without it) only once rank 0 has written the records and summary.json, or
// is found dead: a plain mpirun ends every rank, rank 0 in mid-write
// included, as soon as one exits with an error (or without MPI_Finalize).
// Rank 0's heartbeats keep this wait going while it writes (a final
// evaluation can take a while); kWrittenCapS bounds it anyway.
void wait_for_written(Job& job) {
  constexpr double kWrittenCapS = 600.0;
  const auto& peers = job.watch->peers();
  if (std::find(peers.begin(), peers.end(), 0) == peers.end()) return;
  const RunClock waited;
  comm::IdleBackoff backoff;
  while (job.watch->alive(0)) {
    (void)job.watch->poll(job.clock.now());
    for (const auto& n : job.watch->notices()) {
      // WRITTEN, or ENDING: rank 0 failed and recorded what it could.
      if (n.from == 0 && (n.kind == Kind::kWritten || n.kind == Kind::kEnding)) return;
    }
    if (waited.now() > kWrittenCapS) {
      spdlog::warn(
          "rank 0 has not said that the run's records are written after {:.0f}s; "
          "exiting without it",
          kWrittenCapS);
      return;
    }
    backoff.idle(0.01);
  }
}

// 6. The end, point to point and bounded by cluster.dead_after_s: shards
//    send their final slices to the eval writer and their records to rank
//    0; the eval writer sends rank 0 the final evaluation.
DistributedResult finish(Job& job, RoleOutcome& out) {
  const double limit_s = job.cfg.cluster.dead_after_s + 5.0;
  // A run that failed: every live rank keeps what it last did.
  if (out.outcome.status() == RunStatus::kFailed) {
    (void)comm::flight::dump("the run failed: " + out.outcome.detail);
  }
  comm::SendQueue sends(job.ctrl());
  // A dead eval writer makes no final evaluation: nobody waits for it.
  const bool writer_alive = !gone(job, out, job.eval_writer);
  if (job.role == Role::kShard) {
    if (job.rank != job.eval_writer && writer_alive) {
      auto h = comm::make_header(Kind::kFinal, job.rank, job.rank, out.steps);
      h.count = static_cast<std::uint32_t>(2 * out.theta.size());
      h.examples = out.examples;
      h.compute_s = out.wall_s;
      auto msg = comm::make_message(2 * out.theta.size(), h);
      std::copy(out.theta.begin(), out.theta.end(), msg->payload());
      std::copy(out.ema.begin(), out.ema.end(), msg->payload() + out.theta.size());
      sends.send(std::move(msg), job.eval_writer, comm::kTagFinal);
    }
    if (job.rank != 0) send_text(job.steps->buffered(), 0, job.ctrl(), limit_s);
  }
  DistributedResult result;
  result.run_dir = job.run_dir;
  result.outcome = out.outcome;
  result.dead_ranks = out.dead_ranks;
  result.peer_lost = out.peer_lost;
  result.peers = job.peers;
  if (job.rank == job.eval_writer) {
    // The outcome as rank 0 saw it travels with the evaluation.
    FinalEval fe = final_evaluation(job, out, out.outcome, limit_s);
    if (job.rank != 0) {
      auto h = comm::make_header(Kind::kResult, job.rank, 0);
      h.count = 4;
      h.flags = fe.done ? 1u : 0u;
      auto msg = comm::make_message(4, h);
      const float v[4] = {static_cast<float>(fe.theta.loss), static_cast<float>(fe.theta.accuracy),
                          static_cast<float>(fe.ema.loss), static_cast<float>(fe.ema.accuracy)};
      std::copy(v, v + 4, msg->payload());
      sends.send(std::move(msg), 0, comm::kTagResult);
    } else {
      result.report = write_outputs(job, out, fe, limit_s);
    }
  } else if (job.rank == 0) {
    comm::RecvSlots slots;
    slots.add(job.eval_writer, comm::kTagResult, job.ctrl(), 4);
    FinalEval fe;
    if (!writer_alive) {
      spdlog::warn("no final evaluation: the evaluator ({}) is dead",
                   comm::describe_rank(job.peers, job.eval_writer));
    } else if (slots.post(0), slots.wait_all(limit_s)) {
      const auto& m = slots.message(0);
      const float* v = m.payload();
      fe = {m.header().flags != 0, {v[0], v[1]}, {v[2], v[3]}};
    } else {
      end_deadline("the final evaluation did not arrive", limit_s);
      spdlog::error("the final evaluation did not arrive from the evaluator ({})",
                    comm::describe_rank(job.peers, job.eval_writer));
    }
    result.report = write_outputs(job, out, fe, limit_s);
  }
  if (!sends.drain(limit_s)) {
    end_deadline("some messages of the end phase were not received", limit_s);
    spdlog::warn("end phase: some messages were not received");
  }
  if (job.rank == 0) {
    job.alive_mark.reset();
    tell_written(job);
  } else {
    // Every rank, not only one that lost a peer: MPI_Finalize waits for rank
    // 0, which may write for longer than the limit finalize() gives it (a
    // ResNet-18's final evaluation and checkpoint on a loaded CPU took over
    // 15 s); a rank that then exits without MPI_Finalize gets rank 0 killed
    // before summary.json is written.
    wait_for_written(job);
  }
  return result;
}

}  // namespace

DistributedResult run_distributed(const config::Config& cfg, const Compute& compute, bool quiet,
                                  const rundir::Invocation& inv) {
  Job job(cfg, compute, inv);
  SYNCOPT_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &job.rank));
  SYNCOPT_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &job.world));
  job.peers = comm::gather_peers(job.ctrl());
  job.launch_id =
      broadcast_text(job.ctrl(), inv.launch_id.empty() ? rundir::new_id() : inv.launch_id);
  job.run_dir = std::filesystem::path(cfg.run.dir) / cfg.run.name;
  try {
    comm::agree(job.ctrl(), [&] { job.roles = layout::make_roles(cfg, job.world); });
    job.role = job.roles.role_of(job.rank);
    job.eval_writer = job.roles.eval_writer();
    load_inputs(job);
    build_compute(job);
    measure_peak(job);
    open_outputs(job);
    RoleOutcome out = run_role(job, quiet);
    if (job.rank != 0 && !job.watch->alive(0)) {
      // This rank finished its part without rank 0 (another shard):
      // nobody is left to take its records.
      end_without_rank0(job, UnavailableError(out.outcome.detail.empty() ? "rank 0 is silent"
                                                                         : out.outcome.detail));
    }
    return finish(job, out);
  } catch (const AgreedError& e) {
    // Set-up, before any role ran: every rank knows; rank 0 records the
    // attempt (run.json), leaving the run's summary.json as it was.
    if (job.rank == 0) record_failure(job, rundir::Outcome::failed(e));
    throw;
  } catch (const EndedByPeerError&) {
    throw;  // the rank that ended the job records it
  } catch (const Error& e) {
    if (job.training)
      (void)comm::flight::dump_unless_recent(std::string("error: ") + e.what(), 2.0);
    if (job.watch && job.rank != 0 && !job.watch->alive(0)) end_without_rank0(job, e);
    announce(job, e.code());
    if (const auto* lost = dynamic_cast<const comm::ShardLostError*>(&e);
        lost != nullptr && lost->shard() != 0 && job.rank != 0) {
      // Shard 0 watches every rank and reports the dead shard, once (the
      // ENDING just sent names it too): this rank says one line.
      throw EndedByPeerError(e.code(), "ends with exit " +
                                           std::to_string(static_cast<int>(e.code())) + ": shard " +
                                           std::to_string(lost->shard()) + " (" +
                                           comm::describe_rank(job.peers, lost->shard()) +
                                           ") is silent; shard 0 reports it");
    }
    if (job.rank == 0) {
      rundir::Outcome o = rundir::Outcome::failed(e);
      o.reported_by = rundir::rank_json(job.peers, job.roles, 0);
      record_failure(job, o);
    }
    if (!job.watch) throw;  // nobody watches yet: main ends the job
    if (dynamic_cast<const UnavailableError*>(&e) != nullptr) throw;
    throw AnnouncedError(e.code(), e.what());
  }
}

}  // namespace syncopt::train
