// Distributed training in phases (see distributed.hpp, DESIGN.md §2-§4, §8):
//   1. inputs   every rank loads the data; all agree that it worked
//   2. compute  workers and the evaluating rank build their network
//   3. outputs  rank 0 creates the run directory; the eval writer its log
//   4. roles    from a common start, each rank runs its role's loop
//   5. end      the final parameters, evaluation, records and summary
#include "train/distributed.hpp"

#include <algorithm>
#include <memory>
#include <vector>

#include <spdlog/spdlog.h>

#include "comm/agree.hpp"
#include "comm/mpi.hpp"
#include "common/clock.hpp"
#include "common/error.hpp"
#include "data/dataset.hpp"
#include "layout/roles.hpp"
#include "metrics/analysis.hpp"
#include "metrics/records.hpp"
#include "metrics/step_record.hpp"
#include "optim/optimizer.hpp"
#include "checkpoint/checkpoint.hpp"
#include "train/run_dir.hpp"
#include "ps/shard.hpp"
#include "train/allreduce.hpp"
#include "train/evaluation.hpp"
#include "train/evaluator.hpp"
#include "train/inputs.hpp"
#include "worker/straggler.hpp"
#include "worker/worker.hpp"

namespace syncopt::train {

namespace {

using layout::Role;

// What a rank knows once the job is set up; filled in phase by phase.
struct Job {
  Job(const config::Config& c, const Compute& comp) : cfg(c), compute(comp) {}
  const config::Config& cfg;
  const Compute& compute;
  int rank = 0, world = 1;
  comm::Communicator data_comm, ctrl_comm;  // one duplicate per concern
  layout::Roles roles;
  Role role = Role::kWorker;
  int eval_writer = 0;
  data::TrainTest data;
  std::unique_ptr<worker::StragglerModel> stragglers;
  nn::ModelSpec spec;
  nn::ParamLayout param_layout;
  std::vector<float> init;
  std::vector<layout::Slice> slices;
  layout::Plan plan;
  std::unique_ptr<nn::Backend> backend;
  std::unique_ptr<nn::Network> net;
  std::filesystem::path run_dir;
  std::unique_ptr<metrics::StepLog> steps;  // rank 0: steps.jsonl; other shards: in memory
  std::unique_ptr<metrics::JsonlWriter> eval_file;
  std::unique_ptr<EvalLog> eval;
  RunClock clock;

  bool ps_mode() const { return roles.shards > 0; }
  MPI_Comm ctrl() const { return ctrl_comm.get(); }
};

// What a rank's role leaves for the end phase.
struct RoleOutcome {
  std::vector<float> theta, ema;  // a shard's slice; allreduce: rank 0's full vector
  std::uint64_t examples = 0;
  double wall_s = 0.0;
  std::uint64_t steps = 0;  // updates done
  int stop_signal = 0;      // stopped by this signal, or 0 (completed)
};

// 1. Every rank loads the data (workers train on it, the evaluator tests on
//    it) and the straggler model; every rank agrees that it worked.
void load_inputs(Job& job) {
  const auto& cfg = job.cfg;
  comm::agree(job.ctrl(), [&] {
    job.data = data::load(load_options(cfg));
    if (job.data.train.count < std::max<std::int64_t>(cfg.train.batch, job.roles.workers)) {
      throw ConfigError("the " + std::to_string(job.data.train.count) +
                        " training examples cannot feed train.batch = " +
                        std::to_string(cfg.train.batch) + " on each of " +
                        std::to_string(job.roles.workers) +
                        " workers (each needs its own shard of at least one example); raise "
                        "data.limit_train or use fewer ranks");
    }
    job.stragglers = std::make_unique<worker::StragglerModel>(cfg.stragglers);
    if (job.ps_mode() && job.roles.evaluator_rank < 0 && job.roles.shards > 1 &&
        (cfg.eval.every_steps > 0 || cfg.eval.every_s > 0.0)) {
      throw ConfigError("eval.every_steps/eval.every_s with cluster.ps = " +
                        std::to_string(job.roles.shards) +
                        " needs an evaluator rank: set cluster.evaluator = true (and one more "
                        "rank)");
    }
  });
  job.spec = model_spec(cfg, job.data.train);
  job.param_layout = nn::param_layout(job.spec);
  job.init.resize(job.param_layout.count);
  nn::init_params(job.spec, job.param_layout, job.init.data(), cfg.run.seed);
  if (job.ps_mode()) job.slices = layout::shard_slices(job.param_layout.count, job.roles.shards);
  job.plan = layout::make_plan(cfg, job.roles, job.data.train.count);
}

// 2. Workers need a training network, the eval writer a test one.
void build_compute(Job& job) {
  const int local_rank = comm::node_local_rank(job.ctrl());  // picks the GPU
  comm::agree(job.ctrl(), [&] {
    if (job.role != Role::kWorker && job.rank != job.eval_writer) return;
    job.backend = job.compute.make_backend(local_rank);
    const auto max_batch = job.rank == job.eval_writer
                               ? std::max(job.cfg.train.batch, job.cfg.eval.batch)
                               : job.cfg.train.batch;
    job.net = job.backend->make_network(job.spec, static_cast<int>(max_batch));
  });
}

// 3. Rank 0 opens the run directory (new, or resumed: its records cut back
//    to the latest checkpoint); the eval writer its log; everyone agrees.
void open_outputs(Job& job) {
  const auto& cfg = job.cfg;
  job.run_dir = std::filesystem::path(cfg.run.dir) / cfg.run.name;
  std::uint64_t offsets[2] = {0, 0};  // steps.jsonl, eval.jsonl bytes at the checkpoint
  comm::agree(job.ctrl(), [&] {
    if (job.rank != 0) return;
    open_run_dir(cfg);
    if (cfg.run.resume) {
      const auto ck = checkpoint::load_latest(job.run_dir, {"run"});
      offsets[0] = ck.part("run").get<std::uint64_t>("steps_bytes");
      offsets[1] = ck.part("run").get<std::uint64_t>("eval_bytes");
      job.steps = std::make_unique<metrics::StepLog>(
          metrics::StepLog::resume_file(job.run_dir / "steps.jsonl", offsets[0]));
    } else {
      job.steps = std::make_unique<metrics::StepLog>(
          metrics::StepLog::to_file(job.run_dir / "steps.jsonl"));
    }
  });
  SYNCOPT_CHECK_MPI(MPI_Bcast(offsets, 2, MPI_UINT64_T, 0, job.ctrl()));
  comm::agree(job.ctrl(), [&] {
    if (job.rank != job.eval_writer) return;
    job.eval_file = std::make_unique<metrics::JsonlWriter>(
        cfg.run.resume ? metrics::JsonlWriter::resume_at(job.run_dir / "eval.jsonl", offsets[1])
                       : metrics::JsonlWriter(job.run_dir / "eval.jsonl"));
    job.eval = std::make_unique<EvalLog>(*job.net, job.data.test, *job.eval_file,
                                         job.plan.train_count, cfg.optim.ema > 0.0, job.clock);
  });
  if (job.rank != 0 && job.role == Role::kShard) {
    job.steps = std::make_unique<metrics::StepLog>(metrics::StepLog::in_memory());
  }
  if (job.rank == 0) {
    spdlog::info("run directory: {}", job.run_dir.string());
    spdlog::info("mode {}: {} parameters, {} updates of {} examples ({:.2f} epochs)",
                 config::mode_name(job.roles.mode), job.param_layout.count, job.plan.total_steps,
                 job.plan.examples_per_update, job.plan.total_epochs);
  }
}

RoleOutcome run_shard_role(Job& job, metrics::Progress& progress) {
  ps::ShardSetup st;
  st.cfg = &job.cfg;
  st.roles = &job.roles;
  st.plan = &job.plan;
  st.shard = job.rank;
  st.slice = job.slices[static_cast<std::size_t>(job.rank)];
  st.initial = job.init.data() + st.slice.offset;
  st.data_comm = job.data_comm.get();
  st.ctrl_comm = job.ctrl();
  st.clock = &job.clock;
  st.steps_log = job.steps.get();
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
  return {std::move(r.theta), std::move(r.ema), r.examples, job.clock.now()};
}

RoleOutcome run_worker_role(Job& job) {
  worker::WorkerSetup ws;
  ws.cfg = &job.cfg;
  ws.roles = &job.roles;
  ws.worker = job.roles.worker_of(job.rank);
  ws.slices = job.slices;
  ws.param_count = job.param_layout.count;
  ws.net = job.net.get();
  ws.train = &job.data.train;
  ws.stragglers = job.stragglers.get();
  ws.data_comm = job.data_comm.get();
  worker::Worker w(ws);
  const auto wr = w.run();
  spdlog::debug("worker {}: {} gradients, compute {:.2f}s, delay {:.2f}s, waiting {:.2f}s",
                ws.worker, wr.gradients, wr.compute_s, wr.delay_s, wr.wait_s);
  return {{}, {}, 0, job.clock.now()};
}

RoleOutcome run_allreduce_role(Job& job, metrics::Progress& progress) {
  const auto reducer = job.compute.make_reducer(job.data_comm.get());
  const auto replica = job.compute.make_replica(
      *job.net, job.init.data(), job.param_layout.count,
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
  st.clock = &job.clock;
  st.run_dir = job.run_dir;
  st.steps_log = job.steps.get();
  st.eval_file = job.eval_file.get();
  st.eval = job.eval.get();
  st.progress = &progress;
  AllreduceResult r = run_allreduce(st);
  RoleOutcome out{std::move(r.theta), std::move(r.ema), r.examples, job.clock.now()};
  out.steps = r.steps;
  out.stop_signal = r.stop_signal;
  return out;
}

// 4. The role loops, from a common start.
RoleOutcome run_role(Job& job, bool quiet) {
  SYNCOPT_CHECK_MPI(MPI_Barrier(job.ctrl()));
  job.clock.restart();
  metrics::Progress progress(static_cast<std::int64_t>(job.plan.total_steps),
                             job.cfg.run.progress_every_steps, quiet || job.rank != 0);
  RoleOutcome out;
  if (!job.ps_mode()) {
    out = run_allreduce_role(job, progress);
  } else if (job.role == Role::kShard) {
    out = run_shard_role(job, progress);
  } else if (job.role == Role::kEvaluator) {
    EvaluatorSetup st{&job.cfg,      &job.roles, &job.plan,  job.slices, job.param_layout.count,
                      job.eval.get(), &job.clock, job.ctrl()};
    run_evaluator(st);
    out.wall_s = job.clock.now();
  } else {
    out = run_worker_role(job);
  }
  progress.finish();
  return out;
}

// Gathers every shard's slice to `root` (the others contribute nothing).
std::vector<float> gather_slices(const Job& job, const std::vector<float>& mine, int root) {
  const int world = job.roles.world;
  std::vector<int> counts(static_cast<std::size_t>(world), 0),
      displs(static_cast<std::size_t>(world), 0);
  for (int s = 0; s < job.roles.shards; ++s) {
    counts[static_cast<std::size_t>(s)] = static_cast<int>(job.slices[static_cast<std::size_t>(s)].count);
    displs[static_cast<std::size_t>(s)] = static_cast<int>(job.slices[static_cast<std::size_t>(s)].offset);
  }
  std::vector<float> full(job.rank == root ? job.param_layout.count : 0);
  const int send_count = job.rank < job.roles.shards ? static_cast<int>(mine.size()) : 0;
  SYNCOPT_CHECK_MPI(MPI_Gatherv(mine.data(), send_count, MPI_FLOAT, full.data(), counts.data(),
                                displs.data(), MPI_FLOAT, root, job.ctrl()));
  return full;
}

// Concatenates every rank's text at rank 0.
std::string gather_text(const Job& job, const std::string& mine) {
  const int world = job.roles.world;
  const int n = static_cast<int>(mine.size());
  std::vector<int> sizes(static_cast<std::size_t>(world)), displs(static_cast<std::size_t>(world));
  SYNCOPT_CHECK_MPI(MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, job.ctrl()));
  std::string all;
  if (job.rank == 0) {
    int total = 0;
    for (int r = 0; r < world; ++r) {
      displs[static_cast<std::size_t>(r)] = total;
      total += sizes[static_cast<std::size_t>(r)];
    }
    all.resize(static_cast<std::size_t>(total));
  }
  SYNCOPT_CHECK_MPI(MPI_Gatherv(mine.data(), n, MPI_CHAR, all.data(), sizes.data(), displs.data(),
                                MPI_CHAR, 0, job.ctrl()));
  return all;
}

// 5. End phase: every rank is here; nothing is in flight any more.
DistributedResult finish(Job& job, RoleOutcome& out) {
  std::vector<float> theta, ema;
  if (job.ps_mode()) {
    theta = gather_slices(job, out.theta, job.eval_writer);
    ema = gather_slices(job, out.ema, job.eval_writer);
  } else if (job.rank == 0) {
    theta = std::move(out.theta);
    ema = std::move(out.ema);
  }
  std::uint64_t examples = out.examples;  // shard 0's count (allreduce: every rank's)
  SYNCOPT_CHECK_MPI(MPI_Bcast(&examples, 1, MPI_UINT64_T, 0, job.ctrl()));
  double wall_s = out.wall_s;
  SYNCOPT_CHECK_MPI(MPI_Bcast(&wall_s, 1, MPI_DOUBLE, 0, job.ctrl()));
  std::uint64_t stop[2] = {static_cast<std::uint64_t>(out.stop_signal), out.steps};
  SYNCOPT_CHECK_MPI(MPI_Bcast(stop, 2, MPI_UINT64_T, 0, job.ctrl()));
  const Outcome outcome = stop[0] != 0 ? Outcome::stopped(static_cast<int>(stop[0]), stop[1])
                                       : Outcome{};
  double final_eval[4] = {0, 0, 0, 0};
  comm::agree(job.ctrl(), [&] {
    if (job.rank != job.eval_writer) return;
    if (outcome.status == "completed") {
      const EvalPoint p =
          job.eval->run(job.plan.total_steps, examples, theta.data(), ema.data(), wall_s);
      final_eval[0] = p.theta.loss;
      final_eval[1] = p.theta.accuracy;
      final_eval[2] = p.ema.loss;
      final_eval[3] = p.ema.accuracy;
    }
    job.eval_file->flush();
    metrics::write_floats(job.run_dir / "params.f32", theta);
    metrics::write_floats(job.run_dir / "params_ema.f32", ema);
  });
  SYNCOPT_CHECK_MPI(MPI_Bcast(final_eval, 4, MPI_DOUBLE, job.eval_writer, job.ctrl()));
  // Other shards' records travel to rank 0.
  const std::string others =
      gather_text(job, job.rank != 0 && job.steps ? job.steps->buffered() : std::string{});
  DistributedResult result;
  result.run_dir = job.run_dir;
  result.outcome = outcome;
  comm::agree(job.ctrl(), [&] {
    if (job.rank != 0) return;
    if (!others.empty()) job.steps->append_lines(others);
    job.steps->flush();
    metrics::RunInfo info;
    info.mode = job.roles.mode;
    info.n = job.roles.n;
    info.b = job.roles.backups;
    info.shards = job.roles.shards;
    info.workers = job.roles.workers;
    info.batch = job.cfg.train.batch;
    info.wall_s = wall_s;
    info.examples = examples;
    info.epochs = static_cast<double>(examples) / job.plan.train_count;
    info.test_loss = final_eval[0];
    info.test_acc = final_eval[1];
    info.test_loss_ema = final_eval[2];
    info.test_acc_ema = final_eval[3];
    const auto an = metrics::write_summary(job.run_dir, info, outcome.to_json());
    result.report = metrics::format_report(an, metrics::read_jsonl(job.run_dir / "eval.jsonl"));
  });
  return result;
}

}  // namespace

DistributedResult run_distributed(const config::Config& cfg, const Compute& compute, bool quiet) {
  Job job(cfg, compute);
  SYNCOPT_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &job.rank));
  SYNCOPT_CHECK_MPI(MPI_Comm_size(MPI_COMM_WORLD, &job.world));
  comm::agree(job.ctrl(), [&] {
    job.roles = layout::make_roles(cfg, job.world);
    if (cfg.run.resume && job.roles.shards > 0) {
      throw ConfigError("run.resume = true: resuming a parameter-server run is not implemented "
                        "yet; start a new run (run.resume = false)");
    }
  });
  job.role = job.roles.role_of(job.rank);
  job.eval_writer = job.roles.eval_writer();
  load_inputs(job);
  build_compute(job);
  open_outputs(job);
  RoleOutcome out = run_role(job, quiet);
  return finish(job, out);
}

}  // namespace syncopt::train
