// Distributed training: set-up every rank agrees on, the role loops, and the
// end-of-run collectives (see distributed.hpp, DESIGN.md §2-§4, §8).
#include "train/distributed.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "comm/mpi.hpp"
#include "comm/poll.hpp"
#include "comm/protocol.hpp"
#include "common/error.hpp"
#include "data/batch.hpp"
#include "metrics/analysis.hpp"
#include "metrics/records.hpp"
#include "optim/optimizer.hpp"
#include "ps/shard.hpp"
#include "train/local.hpp"
#include "train/roles.hpp"
#include "worker/straggler.hpp"
#include "worker/worker.hpp"

namespace syncopt::train {

namespace {

using Clock = std::chrono::steady_clock;
Clock::time_point g_run_start = Clock::now();
double run_now() { return std::chrono::duration<double>(Clock::now() - g_run_start).count(); }

// Runs `fn` on every rank; if it threw a syncopt::Error on any rank, every
// rank throws: the failing ones their own error, the others an AgreedError
// with the same exit code. So a missing file on one node ends the job
// cleanly instead of leaving the other ranks waiting.
void agree(MPI_Comm comm, const std::function<void()>& fn) {
  int code = 0;
  std::optional<Error> mine;
  try {
    fn();
  } catch (const Error& e) {
    code = static_cast<int>(e.code());
    mine.emplace(e);
  }
  int worst = 0;
  SYNCOPT_CHECK_MPI(MPI_Allreduce(&code, &worst, 1, MPI_INT, MPI_MAX, comm));
  if (worst == 0) return;
  if (mine) throw AgreedError(mine->code(), mine->what(), true);
  throw AgreedError(static_cast<ExitCode>(worst), "another rank failed (see its message)", false);
}

// Examples one update consumes, the unit in which epochs are counted.
double examples_per_update(const config::Config& cfg, const Roles& roles) {
  const double b = static_cast<double>(cfg.train.batch);
  if (roles.mode == "async" || roles.mode == "ssp") return b;
  return static_cast<double>(roles.n) * b;  // sync, timeout (at most), softsync, allreduce
}

// The evaluator rank: pulls theta and the EMA from every shard at the
// configured interval and evaluates them without stalling training.
void run_evaluator(const config::Config& cfg, const Roles& roles,
                   const std::vector<Slice>& slices, std::size_t param_count,
                   nn::Network& net, const data::Dataset& test, double train_count,
                   std::uint64_t total_steps, MPI_Comm ctrl, metrics::JsonlWriter& log) {
  using comm::Kind;
  using comm::Message;
  const int S = roles.shards;
  const int self = roles.evaluator_rank;
  std::vector<Message> in;
  for (int s = 0; s < S; ++s) in.emplace_back(2 * slices[static_cast<std::size_t>(s)].count);
  std::vector<Message> out;
  for (int s = 0; s < S; ++s) out.emplace_back(0);
  std::vector<float> theta(param_count), ema(param_count);
  std::uint64_t want = cfg.eval.every_steps > 0 ? static_cast<std::uint64_t>(cfg.eval.every_steps)
                       : cfg.eval.every_s > 0.0 ? 0
                                                : total_steps;
  double next_time = cfg.eval.every_s;
  comm::IdleBackoff backoff;
  std::vector<MPI_Status> statuses;
  // Every shard sends one notice when its training ends; a pending receive
  // for them lets a long eval.every_s wait end at once.
  std::vector<Message> notices;
  for (int s = 0; s < S; ++s) notices.emplace_back(0);
  std::vector<MPI_Request> notice_reqs(static_cast<std::size_t>(S), MPI_REQUEST_NULL);
  comm::CancelOnExit cancel_notices(notice_reqs);
  for (int s = 0; s < S; ++s) {
    SYNCOPT_CHECK_MPI(MPI_Irecv(notices[static_cast<std::size_t>(s)].data(),
                                notices[static_cast<std::size_t>(s)].max_bytes(), MPI_BYTE, s,
                                comm::kTagEvalNotice, ctrl,
                                &notice_reqs[static_cast<std::size_t>(s)]));
  }
  auto any_notice = [&] {
    int flag = 0, index = 0;
    SYNCOPT_CHECK_MPI(MPI_Testany(S, notice_reqs.data(), &index, &flag, MPI_STATUS_IGNORE));
    return flag != 0 && index != MPI_UNDEFINED;
  };
  bool ended = false;
  for (;;) {
    if (cfg.eval.every_s > 0.0 && cfg.eval.every_steps == 0) {
      while (!ended && run_now() < next_time) {
        ended = any_notice();
        comm::sleep_s(std::min(0.05, next_time - run_now()));
      }
      next_time = run_now() + cfg.eval.every_s;
    }
    std::vector<MPI_Request> recv(static_cast<std::size_t>(S)), send(static_cast<std::size_t>(S));
    for (int s = 0; s < S; ++s) {
      auto& m = in[static_cast<std::size_t>(s)];
      SYNCOPT_CHECK_MPI(MPI_Irecv(m.data(), m.max_bytes(), MPI_BYTE, s, comm::kTagToEvaluator,
                                  ctrl, &recv[static_cast<std::size_t>(s)]));
      auto& h = out[static_cast<std::size_t>(s)].header();
      h = comm::MsgHeader{};
      h.kind = static_cast<std::uint16_t>(Kind::kEvalPull);
      h.sender = static_cast<std::uint32_t>(self);
      h.shard = static_cast<std::uint32_t>(s);
      h.param_version = want;
      SYNCOPT_CHECK_MPI(MPI_Isend(out[static_cast<std::size_t>(s)].data(), Message::wire_bytes(0),
                                  MPI_BYTE, s, comm::kTagToShard, ctrl,
                                  &send[static_cast<std::size_t>(s)]));
    }
    bool finished = true;
    std::uint64_t version = ~std::uint64_t{0}, examples = 0;
    int outstanding = S;
    while (outstanding > 0) {
      const auto done = comm::wait_some(recv, statuses, backoff);
      for (std::size_t j = 0; j < done.size(); ++j) {
        const int s = done[j];
        int bytes = 0;
        MPI_Get_count(&statuses[j], MPI_BYTE, &bytes);
        const auto& m = in[static_cast<std::size_t>(s)];
        const auto& sl = slices[static_cast<std::size_t>(s)];
        const std::string err = comm::check_header(
            m.header(), {static_cast<std::uint32_t>(s), {Kind::kParams},
                         static_cast<std::uint32_t>(s), 2 * sl.count, bytes});
        if (!err.empty()) throw InternalError("evaluator rejected a " + err);
        std::copy_n(m.payload(), sl.count, theta.begin() + static_cast<std::ptrdiff_t>(sl.offset));
        std::copy_n(m.payload() + sl.count, sl.count,
                    ema.begin() + static_cast<std::ptrdiff_t>(sl.offset));
        finished = finished && m.header().step_seq == 1;
        version = std::min<std::uint64_t>(version, m.header().param_version);
        if (s == 0) examples = m.header().examples;
        --outstanding;
      }
    }
    comm::wait_all(send);
    if (finished) break;  // the final evaluation happens in the end phase
    const EvalResult raw = evaluate(net, theta.data(), test);
    const EvalResult avg = cfg.optim.ema > 0.0 ? evaluate(net, ema.data(), test) : raw;
    write_eval(log, version, run_now(), examples, train_count, raw, avg);
    spdlog::info("eval at step {}: test_acc {:.2f}% (EMA {:.2f}%)", version, 100 * raw.accuracy,
                 100 * avg.accuracy);
    if (cfg.eval.every_steps > 0) want = version + static_cast<std::uint64_t>(cfg.eval.every_steps);
  }
  comm::wait_all(notice_reqs);
  std::vector<MPI_Request> bye(static_cast<std::size_t>(S));
  for (int s = 0; s < S; ++s) {
    auto& h = out[static_cast<std::size_t>(s)].header();
    h = comm::MsgHeader{};
    h.kind = static_cast<std::uint16_t>(Kind::kCtrl);
    h.sender = static_cast<std::uint32_t>(self);
    h.shard = static_cast<std::uint32_t>(s);
    SYNCOPT_CHECK_MPI(MPI_Isend(out[static_cast<std::size_t>(s)].data(), Message::wire_bytes(0),
                                MPI_BYTE, s, comm::kTagToShard, ctrl,
                                &bye[static_cast<std::size_t>(s)]));
  }
  comm::wait_all(bye);
}

// allreduce mode: every rank a worker; mean gradient by MPI_Allreduce, the
// optimiser applied on every rank (the Horovod/DDP baseline).
struct AllreduceOut {
  std::vector<float> theta, ema;
  std::uint64_t examples = 0;
};

AllreduceOut run_allreduce(const config::Config& cfg, const Roles& roles, int rank,
                           nn::Network& net, const data::Dataset& train,
                           const data::Dataset& test, const float* init, std::size_t count,
                           std::uint64_t total_steps, double lr_multiplier,
                           const worker::StragglerModel& stragglers, MPI_Comm comm,
                           metrics::JsonlWriter* steps_log, metrics::JsonlWriter* eval_log,
                           metrics::Progress* progress) {
  const int W = roles.workers;
  const int batch = static_cast<int>(cfg.train.batch);
  data::BatchLoader loader(train, batch, cfg.run.seed, rank, W, cfg.data.augment,
                           {cfg.data.augment_max_rotate_deg, cfg.data.augment_max_zoom});
  AllreduceOut out;
  out.theta.assign(init, init + count);
  std::vector<float> grad(count);
  optim::Optimizer opt(optim::optimizer_options(cfg.optim), count);
  const bool use_ema = cfg.optim.ema > 0.0;
  optim::Ema ema(use_ema ? cfg.optim.ema : 0.0, out.theta.data(), count);
  const double per_update = static_cast<double>(W) * batch;
  const auto train_count = static_cast<double>(train.count);
  const optim::ScheduleOptions sched = optim::schedule_options(
      cfg.optim, static_cast<double>(total_steps) * per_update / train_count, lr_multiplier);
  const float inv = 1.0f / static_cast<float>(W);
  // NCCL on GPUs (every rank its own device), MPI_Allreduce otherwise.
  const auto device_reduce = nn::make_device_allreduce(cfg.compute.backend, comm);
  std::vector<double> mine(3), all(static_cast<std::size_t>(3 * W));
  double last_eval_s = 0.0;
  for (std::uint64_t step = 1; step <= total_steps; ++step) {
    const double t_start = run_now();
    loader.next();
    const float loss = net.train_step(out.theta.data(), loader.images(), loader.labels(), batch,
                                      grad.data());
    const double compute_s = run_now() - t_start;
    comm::sleep_s(stragglers.delay_s(rank, step - 1, compute_s));
    const double ready_s = run_now() - t_start;
    if (device_reduce) {
      device_reduce->mean(grad.data(), count);
    } else {
      SYNCOPT_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, grad.data(), static_cast<int>(count),
                                      MPI_FLOAT, MPI_SUM, comm));
      for (auto& g : grad) g *= inv;
    }
    const double epoch = static_cast<double>(out.examples) / train_count;
    const auto lr = static_cast<float>(optim::learning_rate(sched, epoch));
    opt.step(out.theta.data(), grad.data(), lr);
    if (use_ema) ema.update(out.theta.data());
    out.examples += static_cast<std::uint64_t>(per_update);
    // Rank 0 records when each rank's gradient was ready (its "arrival").
    mine = {ready_s, compute_s, static_cast<double>(loss)};
    SYNCOPT_CHECK_MPI(MPI_Gather(mine.data(), 3, MPI_DOUBLE, all.data(), 3, MPI_DOUBLE, 0, comm));
    if (rank != 0) continue;
    nlohmann::json grads = nlohmann::json::array();
    double loss_sum = 0.0;
    for (int w = 0; w < W; ++w) {
      const auto i = static_cast<std::size_t>(3 * w);
      grads.push_back({{"worker", w}, {"arrival_s", all[i]}, {"version", step - 1},
                       {"accepted", true}, {"staleness", 0}, {"compute_s", all[i + 1]},
                       {"loss", all[i + 2]}, {"seq", step - 1}});
      loss_sum += all[i + 2];
    }
    steps_log->write({{"step", step}, {"shard", 0}, {"t_start", t_start}, {"t_apply", run_now()},
                      {"version", step - 1}, {"lr", lr}, {"loss", loss_sum / W}, {"used", W},
                      {"grads", std::move(grads)}});
    progress->update(static_cast<std::int64_t>(step), static_cast<double>(out.examples) / train_count,
                     loss_sum / W, static_cast<double>(out.examples) / std::max(1e-9, run_now()),
                     run_now());
    const bool by_steps =
        cfg.eval.every_steps > 0 && step % static_cast<std::uint64_t>(cfg.eval.every_steps) == 0;
    const bool by_time = cfg.eval.every_s > 0.0 && run_now() - last_eval_s >= cfg.eval.every_s;
    if ((by_steps || by_time) && step != total_steps) {
      last_eval_s = run_now();
      const EvalResult raw = evaluate(net, out.theta.data(), test);
      const EvalResult avg = use_ema ? evaluate(net, ema.data(), test) : raw;
      write_eval(*eval_log, step, run_now(), out.examples, train_count, raw, avg);
      progress->note("eval at step " + std::to_string(step) + ": test_acc " +
                     std::to_string(100 * raw.accuracy) + "%");
    }
  }
  out.ema = use_ema ? std::vector<float>(ema.data(), ema.data() + count) : out.theta;
  return out;
}

// Gathers every shard's slice to `root` (the others contribute nothing).
std::vector<float> gather_slices(const std::vector<float>& mine, const Roles& roles,
                                 const std::vector<Slice>& slices, std::size_t count, int root,
                                 int rank, MPI_Comm comm) {
  std::vector<int> counts(static_cast<std::size_t>(roles.world), 0),
      displs(static_cast<std::size_t>(roles.world), 0);
  for (int s = 0; s < roles.shards; ++s) {
    counts[static_cast<std::size_t>(s)] = static_cast<int>(slices[static_cast<std::size_t>(s)].count);
    displs[static_cast<std::size_t>(s)] = static_cast<int>(slices[static_cast<std::size_t>(s)].offset);
  }
  std::vector<float> full(rank == root ? count : 0);
  const int send_count = rank < roles.shards ? static_cast<int>(mine.size()) : 0;
  SYNCOPT_CHECK_MPI(MPI_Gatherv(mine.data(), send_count, MPI_FLOAT, full.data(), counts.data(),
                                displs.data(), MPI_FLOAT, root, comm));
  return full;
}

// Concatenates every rank's text at rank 0.
std::string gather_text(const std::string& mine, int rank, int world, MPI_Comm comm) {
  const int n = static_cast<int>(mine.size());
  std::vector<int> sizes(static_cast<std::size_t>(world)), displs(static_cast<std::size_t>(world));
  SYNCOPT_CHECK_MPI(MPI_Gather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, comm));
  std::string all;
  if (rank == 0) {
    int total = 0;
    for (int r = 0; r < world; ++r) {
      displs[static_cast<std::size_t>(r)] = total;
      total += sizes[static_cast<std::size_t>(r)];
    }
    all.resize(static_cast<std::size_t>(total));
  }
  SYNCOPT_CHECK_MPI(MPI_Gatherv(mine.data(), n, MPI_CHAR, all.data(), sizes.data(), displs.data(),
                                MPI_CHAR, 0, comm));
  return all;
}

}  // namespace

DistributedResult run_distributed(const config::Config& cfg, bool quiet) {
  int rank = 0, world = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  comm::Communicator data_comm, ctrl_comm;  // one duplicate per concern
  const MPI_Comm ctrl = ctrl_comm.get();
  if (cfg.run.resume) {
    throw ConfigError("run.resume = true: resuming is not implemented in this version; start a "
                      "new run (run.resume = false)");
  }
  const Roles roles = make_roles(cfg, world);
  const Role role = roles.role_of(rank);
  const bool ps_mode = roles.shards > 0;

  // 1. Input: every rank loads the data (workers train on it, the evaluator
  //    tests on it); every rank agrees that it worked before going on.
  data::TrainTest data;
  std::unique_ptr<worker::StragglerModel> stragglers;
  agree(ctrl, [&] {
    data = data::load(load_options(cfg));
    if (data.train.count < std::max<std::int64_t>(cfg.train.batch, roles.workers)) {
      throw ConfigError("the " + std::to_string(data.train.count) +
                        " training examples cannot feed train.batch = " +
                        std::to_string(cfg.train.batch) + " on each of " +
                        std::to_string(roles.workers) +
                        " workers (each needs its own shard of at least one example); raise "
                        "data.limit_train or use fewer ranks");
    }
    stragglers = std::make_unique<worker::StragglerModel>(cfg.stragglers);
  });
  const nn::ModelSpec spec = model_spec(cfg, data.train);
  const nn::ParamLayout layout = nn::param_layout(spec);
  std::vector<float> init(layout.count);
  nn::init_params(spec, layout, init.data(), cfg.run.seed);
  const auto slices = ps_mode ? shard_slices(layout.count, roles.shards) : std::vector<Slice>{};
  const double train_count = static_cast<double>(data.train.count);
  const double per_update = examples_per_update(cfg, roles);
  const std::uint64_t total_steps =
      cfg.train.steps > 0 ? static_cast<std::uint64_t>(cfg.train.steps)
                          : static_cast<std::uint64_t>(std::ceil(cfg.train.epochs * train_count / per_update));
  const double lr_multiplier = cfg.optim.scale_lr_by_n ? static_cast<double>(roles.n) : 1.0;
  const int eval_writer = roles.eval_writer();
  if (ps_mode && roles.evaluator_rank < 0 && roles.shards > 1 &&
      (cfg.eval.every_steps > 0 || cfg.eval.every_s > 0.0)) {
    throw ConfigError("eval.every_steps/eval.every_s with cluster.ps = " +
                      std::to_string(roles.shards) +
                      " needs an evaluator rank: set cluster.evaluator = true (and one more rank)");
  }

  // 2. Compute: workers need a training network, the eval writer a test one.
  std::unique_ptr<nn::Backend> backend;
  std::unique_ptr<nn::Network> net;
  const int local_rank = comm::node_local_rank(ctrl);  // picks the GPU
  agree(ctrl, [&] {
    const bool computes = role == Role::kWorker || rank == eval_writer;
    if (!computes) return;
    backend = nn::make_backend(cfg.compute.backend, static_cast<int>(cfg.compute.threads),
                               local_rank);
    const int max_batch = static_cast<int>(rank == eval_writer
                                               ? std::max(cfg.train.batch, cfg.eval.batch)
                                               : cfg.train.batch);
    net = backend->make_network(spec, max_batch);
  });

  // 3. Outputs: rank 0 creates the run directory; everyone agrees it did.
  DistributedResult result;
  result.run_dir = std::filesystem::path(cfg.run.dir) / cfg.run.name;
  std::unique_ptr<metrics::JsonlWriter> steps_log, eval_log;
  agree(ctrl, [&] {
    if (rank != 0) return;
    metrics::create_run_dir(cfg.run.dir, cfg.run.name, cfg.run.overwrite);
    metrics::write_file_atomic(result.run_dir / "config.toml", config::to_toml(cfg));
    steps_log = std::make_unique<metrics::JsonlWriter>(result.run_dir / "steps.jsonl");
  });
  agree(ctrl, [&] {
    if (rank == eval_writer) {
      eval_log = std::make_unique<metrics::JsonlWriter>(result.run_dir / "eval.jsonl");
    }
  });
  if (rank == 0) {
    spdlog::info("run directory: {}", result.run_dir.string());
    spdlog::info("mode {}: {} parameters, {} updates of {} examples ({:.2f} epochs)", roles.mode,
                 layout.count, total_steps, per_update,
                 static_cast<double>(total_steps) * per_update / train_count);
  }

  // 4. The role loops, from a common start.
  SYNCOPT_CHECK_MPI(MPI_Barrier(ctrl));
  g_run_start = Clock::now();
  metrics::Progress progress(static_cast<std::int64_t>(total_steps), cfg.run.progress_every_steps,
                             quiet || rank != 0);
  std::vector<float> my_theta, my_ema;
  std::uint64_t examples = 0;
  try {
  if (!ps_mode) {
    AllreduceOut out = run_allreduce(cfg, roles, rank, *net, data.train, data.test, init.data(),
                                     layout.count, total_steps, lr_multiplier, *stragglers,
                                     data_comm.get(), steps_log.get(), eval_log.get(), &progress);
    examples = out.examples;
    if (rank == 0) {
      my_theta = std::move(out.theta);
      my_ema = std::move(out.ema);
    }
  } else if (role == Role::kShard) {
    ps::ShardSetup st;
    st.cfg = &cfg;
    st.roles = &roles;
    st.shard = rank;
    st.slice = slices[static_cast<std::size_t>(rank)];
    st.initial = init.data() + st.slice.offset;
    st.total_steps = total_steps;
    if (cfg.train.steps == 0) {
      st.target_examples =
          static_cast<std::uint64_t>(std::ceil(cfg.train.epochs * train_count));
    }
    st.train_count = train_count;
    st.lr_multiplier = lr_multiplier;
    st.data_comm = data_comm.get();
    st.ctrl_comm = ctrl;
    st.now = &run_now;
    st.steps_log = rank == 0 ? steps_log.get() : nullptr;
    if (rank == 0) {
      st.on_update = [&](std::uint64_t step, std::uint64_t ex, float loss) {
        progress.update(static_cast<std::int64_t>(step), static_cast<double>(ex) / train_count,
                        loss, static_cast<double>(ex) / std::max(1e-9, run_now()), run_now());
      };
      if (roles.evaluator_rank < 0 && (cfg.eval.every_steps > 0 || cfg.eval.every_s > 0.0)) {
        // One shard, no evaluator: evaluate here, stalling this step (logged).
        st.inline_eval_every = static_cast<std::uint64_t>(cfg.eval.every_steps);
        st.inline_eval_every_s = cfg.eval.every_s;
        st.inline_eval = [&](std::uint64_t step, std::uint64_t ex, const float* theta,
                             const float* ema) {
          const double t0 = run_now();
          const EvalResult raw = evaluate(*net, theta, data.test);
          const EvalResult avg = cfg.optim.ema > 0.0 ? evaluate(*net, ema, data.test) : raw;
          write_eval(*eval_log, step, run_now(), ex, train_count, raw, avg);
          progress.note("eval at step " + std::to_string(step) + " (stalled the shard " +
                        std::to_string(run_now() - t0) + "s): test_acc " +
                        std::to_string(100 * raw.accuracy) + "%, EMA " +
                        std::to_string(100 * avg.accuracy) + "%");
        };
      }
    }
    ps::ShardResult r = ps::run_shard(st);
    examples = r.examples;
    my_theta = std::move(r.theta);
    my_ema = std::move(r.ema);
    if (rank != 0) steps_log.reset();
    // Other shards' records travel to rank 0 in the end phase.
    result.report = std::move(r.records);
  } else if (role == Role::kEvaluator) {
    run_evaluator(cfg, roles, slices, layout.count, *net, data.test, train_count, total_steps,
                  ctrl, *eval_log);
  } else {
    worker::WorkerSetup ws;
    ws.cfg = &cfg;
    ws.roles = &roles;
    ws.worker = roles.worker_of(rank);
    ws.slices = slices;
    ws.param_count = layout.count;
    ws.net = net.get();
    ws.train = &data.train;
    ws.stragglers = stragglers.get();
    ws.data_comm = data_comm.get();
    const auto wr = worker::run_worker(ws);
    spdlog::debug("worker {}: {} gradients, compute {:.2f}s, delay {:.2f}s, waiting {:.2f}s",
                  ws.worker, wr.gradients, wr.compute_s, wr.delay_s, wr.wait_s);
  }
  } catch (const ConfigError& e) {
    // Raised on this rank alone, inside a role loop: the others may be
    // waiting for it, so it must end the job (main aborts on a plain Error).
    throw Error(ExitCode::kConfig, e.what());
  }
  progress.finish();
  const double wall_s = run_now();

  // 5. End phase: every rank is here; nothing is in flight any more.
  std::vector<float> theta, ema;
  if (ps_mode) {
    theta = gather_slices(my_theta, roles, slices, layout.count, eval_writer, rank, ctrl);
    ema = gather_slices(my_ema, roles, slices, layout.count, eval_writer, rank, ctrl);
  } else if (rank == 0) {
    theta = std::move(my_theta);
    ema = std::move(my_ema);
  }
  std::uint64_t shard0_examples = examples;
  SYNCOPT_CHECK_MPI(MPI_Bcast(&shard0_examples, 1, MPI_UINT64_T, 0, ctrl));
  double final_eval[4] = {0, 0, 0, 0};
  agree(ctrl, [&] {
    if (rank != eval_writer) return;
    const EvalResult raw = evaluate(*net, theta.data(), data.test);
    const EvalResult avg = cfg.optim.ema > 0.0 ? evaluate(*net, ema.data(), data.test) : raw;
    write_eval(*eval_log, total_steps, wall_s, shard0_examples, train_count, raw, avg);
    final_eval[0] = raw.loss;
    final_eval[1] = raw.accuracy;
    final_eval[2] = avg.loss;
    final_eval[3] = avg.accuracy;
    metrics::write_floats(result.run_dir / "params.f32", theta);
    metrics::write_floats(result.run_dir / "params_ema.f32", ema);
  });
  SYNCOPT_CHECK_MPI(MPI_Bcast(final_eval, 4, MPI_DOUBLE, eval_writer, ctrl));
  const std::string others = gather_text(rank == 0 ? std::string{} : result.report, rank, world, ctrl);
  result.report.clear();
  agree(ctrl, [&] {
    if (rank != 0) return;
    if (!others.empty()) {
      std::ofstream app(result.run_dir / "steps.jsonl", std::ios::app);
      steps_log->flush();
      app << others;
    }
    steps_log->flush();
    metrics::RunInfo info;
    info.mode = roles.mode;
    info.n = roles.n;
    info.b = roles.backups;
    info.shards = roles.shards;
    info.workers = roles.workers;
    info.batch = cfg.train.batch;
    info.wall_s = wall_s;
    info.examples = shard0_examples;
    info.epochs = static_cast<double>(shard0_examples) / train_count;
    info.test_loss = final_eval[0];
    info.test_acc = final_eval[1];
    info.test_loss_ema = final_eval[2];
    info.test_acc_ema = final_eval[3];
    const auto records = metrics::read_jsonl(result.run_dir / "steps.jsonl");
    const metrics::RunAnalysis an = metrics::analyze(records, info);
    metrics::write_file_atomic(result.run_dir / "summary.json", an.summary.dump(2) + "\n");
    result.report = metrics::format_report(an, metrics::read_jsonl(result.run_dir / "eval.jsonl"));
  });
  return result;
}

}  // namespace syncopt::train
