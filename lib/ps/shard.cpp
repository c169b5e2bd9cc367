// The parameter-server shard loop (see shard.hpp and DESIGN.md §3-§4).
#include "ps/shard.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <list>
#include <memory>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "comm/mpi.hpp"
#include "comm/poll.hpp"
#include "comm/protocol.hpp"
#include "common/error.hpp"
#include "optim/optimizer.hpp"
#include "ps/shard_core.hpp"

namespace syncopt::ps {

namespace {

using comm::Kind;
using comm::Message;

// A published parameter version, sent to any number of workers; reused once
// every send from it has completed.
struct Snapshot {
  explicit Snapshot(std::size_t count) : msg(count) {}
  Message msg;
  std::vector<MPI_Request> sends;
  bool in_flight() {
    if (sends.empty()) return false;
    int done = 0;
    SYNCOPT_CHECK_MPI(MPI_Testall(static_cast<int>(sends.size()), sends.data(), &done,
                                  MPI_STATUSES_IGNORE));
    if (done) sends.clear();
    return !done;
  }
};

nlohmann::json to_json(const StepRecord& r, int shard) {
  nlohmann::json grads = nlohmann::json::array();
  for (const auto& g : r.grads) {
    grads.push_back({{"worker", g.worker},
                     {"arrival_s", g.arrival_s},
                     {"version", g.version},
                     {"accepted", g.accepted},
                     {"staleness", g.staleness},
                     {"compute_s", g.compute_s},
                     {"loss", g.loss},
                     {"seq", g.seq}});
  }
  return {{"step", r.step},       {"shard", shard},     {"t_start", r.t_start},
          {"t_apply", r.t_apply}, {"version", r.version}, {"lr", r.lr},
          {"loss", r.loss},       {"used", r.used},     {"grads", std::move(grads)}};
}

[[noreturn]] void protocol_error(int shard, const std::string& what) {
  throw InternalError("parameter-server shard " + std::to_string(shard) + " rejected a " + what +
                      " (nothing was applied; check that every rank runs the same syncopt "
                      "binary and config)");
}

}  // namespace

ShardResult run_shard(const ShardSetup& st) {
  const config::Config& cfg = *st.cfg;
  const train::Roles& roles = *st.roles;
  const int K = roles.workers;
  const std::size_t count = st.slice.count;
  const Mode mode = parse_mode(cfg.train.mode);
  const bool sync_like = mode == Mode::kSync || mode == Mode::kTimeout;
  const auto batch = static_cast<std::uint64_t>(cfg.train.batch);
  const int self = st.shard;

  ShardCore core(mode, K, roles.n, count, cfg.train.timeout_ms / 1000.0);
  std::vector<float> theta(st.initial, st.initial + count);
  std::vector<float> mean(count);
  optim::Optimizer opt(optim::optimizer_options(cfg.optim), count);
  const bool use_ema = cfg.optim.ema > 0.0;
  optim::Ema ema(use_ema ? cfg.optim.ema : 0.0, theta.data(), count);
  // Examples per update, the unit of the schedule's epochs.
  const double per_update = sync_like || mode == Mode::kSoftsync
                                ? static_cast<double>(static_cast<std::uint64_t>(roles.n) * batch)
                                : static_cast<double>(batch);
  const double run_epochs =
      st.target_examples > 0 ? static_cast<double>(st.target_examples) / st.train_count
                             : static_cast<double>(st.total_steps) * per_update / st.train_count;
  const optim::ScheduleOptions sched =
      optim::schedule_options(cfg.optim, run_epochs, st.lr_multiplier);

  // Receives: one per worker on the data communicator, one for the evaluator.
  const bool has_eval = roles.evaluator_rank >= 0;
  std::vector<Message> inbox;
  inbox.reserve(static_cast<std::size_t>(K));
  for (int w = 0; w < K; ++w) inbox.emplace_back(count);
  Message eval_in(0);
  std::vector<MPI_Request> reqs(static_cast<std::size_t>(K) + 1, MPI_REQUEST_NULL);
  auto post = [&](int i) {
    if (i < K) {
      SYNCOPT_CHECK_MPI(MPI_Irecv(inbox[static_cast<std::size_t>(i)].data(),
                                  inbox[static_cast<std::size_t>(i)].max_bytes(), MPI_BYTE,
                                  roles.worker_rank(i), comm::kTagToShard, st.data_comm,
                                  &reqs[static_cast<std::size_t>(i)]));
    } else {
      SYNCOPT_CHECK_MPI(MPI_Irecv(eval_in.data(), eval_in.max_bytes(), MPI_BYTE,
                                  roles.evaluator_rank, comm::kTagToShard, st.ctrl_comm,
                                  &reqs[static_cast<std::size_t>(K)]));
    }
  };
  comm::CancelOnExit cancel_receives(reqs);
  for (int w = 0; w < K; ++w) post(w);
  if (has_eval) post(K);

  // Replies.
  std::list<Snapshot> snapshots;
  Snapshot* current = nullptr;  // snapshot of the current version, if published
  auto publish = [&]() -> Snapshot& {
    if (current != nullptr) return *current;
    Snapshot* free_snap = nullptr;
    for (auto& s : snapshots) {
      if (!s.in_flight()) {
        free_snap = &s;
        break;
      }
    }
    if (free_snap == nullptr) free_snap = &snapshots.emplace_back(count);
    auto& h = free_snap->msg.header();
    h = comm::MsgHeader{};
    h.kind = static_cast<std::uint16_t>(Kind::kParams);
    h.sender = static_cast<std::uint32_t>(self);
    h.shard = static_cast<std::uint32_t>(self);
    h.param_version = core.version();
    h.count = static_cast<std::uint32_t>(count);
    std::copy(theta.begin(), theta.end(), free_snap->msg.payload());
    current = free_snap;
    return *free_snap;
  };
  Message stop_msg(0);
  std::vector<MPI_Request> stop_sends;
  Message eval_out(2 * count);
  MPI_Request eval_send = MPI_REQUEST_NULL;
  Message eval_notice(0);
  MPI_Request eval_notice_send = MPI_REQUEST_NULL;

  struct Pending {
    bool waiting = false;
    std::uint64_t version = 0;
  };
  std::vector<Pending> pending(static_cast<std::size_t>(K));
  std::vector<std::int64_t> clock(static_cast<std::size_t>(K), 0);  // gradients pushed (ssp)
  std::vector<char> done(static_cast<std::size_t>(K), 0);
  int done_workers = 0;
  bool eval_done = !has_eval;
  bool eval_waiting = false;
  std::uint64_t eval_version = 0;
  // Done after train.steps updates, or after train.epochs of accepted
  // examples (timeout mode's updates carry fewer than N gradients, so the
  // count of updates alone would end it early).
  auto done_training = [&](std::uint64_t version, std::uint64_t examples_so_far) {
    return st.target_examples > 0 ? examples_so_far >= st.target_examples
                                  : version >= st.total_steps;
  };
  bool finished = done_training(0, 0);
  double last_inline_eval_s = 0.0;
  ShardResult result;
  std::uint64_t examples = 0;

  auto reply = [&](int w) {
    const int dest = roles.worker_rank(w);
    MPI_Request req = MPI_REQUEST_NULL;
    if (finished) {
      // Written once: the buffer may already be in flight to other workers.
      auto& h = stop_msg.header();
      if (stop_sends.empty()) {
        h = comm::MsgHeader{};
        h.kind = static_cast<std::uint16_t>(Kind::kStop);
        h.sender = static_cast<std::uint32_t>(self);
        h.shard = static_cast<std::uint32_t>(self);
        h.param_version = core.version();
      }
      SYNCOPT_CHECK_MPI(MPI_Isend(stop_msg.data(), Message::wire_bytes(0), MPI_BYTE, dest,
                                  comm::kTagToWorker, st.data_comm, &req));
      stop_sends.push_back(req);
    } else {
      Snapshot& snap = publish();
      SYNCOPT_CHECK_MPI(MPI_Isend(snap.msg.data(), Message::wire_bytes(count), MPI_BYTE, dest,
                                  comm::kTagToWorker, st.data_comm, &req));
      snap.sends.push_back(req);
    }
    pending[static_cast<std::size_t>(w)].waiting = false;
  };
  auto may_reply = [&](int w) {
    const Pending& p = pending[static_cast<std::size_t>(w)];
    if (finished || p.version == comm::kAnyVersion) return true;
    switch (mode) {
      case Mode::kSync:
      case Mode::kTimeout: return core.version() > p.version;
      case Mode::kSsp: {
        std::int64_t slowest = -1;
        for (int v = 0; v < K; ++v) {
          if (done[static_cast<std::size_t>(v)]) continue;
          const auto c = clock[static_cast<std::size_t>(v)];
          slowest = slowest < 0 ? c : std::min(slowest, c);
        }
        return slowest < 0 || clock[static_cast<std::size_t>(w)] - slowest <= cfg.train.ssp_bound;
      }
      case Mode::kAsync:
      case Mode::kSoftsync: return true;
    }
    return true;
  };

  // Applies every update that is due. Called after each message, so that in
  // async modes every gradient is its own update, and in sync modes the
  // messages behind the N-th are judged against the new version.
  auto apply_due = [&]() {
    bool applied = false;
    while (!finished && core.ready(st.now())) {
      const int used = core.pending();
      const double epoch = static_cast<double>(examples) / st.train_count;
      const auto lr = static_cast<float>(optim::learning_rate(sched, epoch));
      StepRecord rec = core.apply(mean.data(), st.now());
      if (!std::isfinite(rec.loss)) {
        throw Error(ExitCode::kInternal,
                    "training diverged: the mean loss of update " + std::to_string(rec.step) +
                        " at shard " + std::to_string(self) + " is " + std::to_string(rec.loss) +
                        " (lr " + std::to_string(lr) +
                        "); lower optim.lr (asynchronous modes need a smaller one than sync: "
                        "each update is one worker's batch, and stale)");
      }
      opt.step(theta.data(), mean.data(), lr);
      if (use_ema) ema.update(theta.data());
      examples += static_cast<std::uint64_t>(used) * batch;
      rec.lr = lr;
      rec.t_apply = st.now();
      core.set_step_start(rec.t_apply);
      current = nullptr;  // parameters changed: next reply publishes anew
      const auto json = to_json(rec, self);
      if (st.steps_log != nullptr) {
        st.steps_log->write(json);
      } else {
        result.records += json.dump();
        result.records += '\n';
      }
      finished = done_training(core.version(), examples);
      if (finished && has_eval) {
        // Wake the evaluator from its wait: training has ended.
        auto& h = eval_notice.header();
        h = comm::MsgHeader{};
        h.kind = static_cast<std::uint16_t>(Kind::kStop);
        h.sender = static_cast<std::uint32_t>(self);
        h.shard = static_cast<std::uint32_t>(self);
        h.param_version = core.version();
        SYNCOPT_CHECK_MPI(MPI_Isend(eval_notice.data(), Message::wire_bytes(0), MPI_BYTE,
                                    roles.evaluator_rank, comm::kTagEvalNotice, st.ctrl_comm,
                                    &eval_notice_send));
      }
      if (st.on_update) st.on_update(core.version(), examples, rec.loss);
      if (st.inline_eval && !finished) {
        const bool by_steps = st.inline_eval_every > 0 && core.version() % st.inline_eval_every == 0;
        const bool by_time = st.inline_eval_every_s > 0.0 &&
                             st.now() - last_inline_eval_s >= st.inline_eval_every_s;
        if (by_steps || by_time) {
          st.inline_eval(core.version(), examples, theta.data(),
                         use_ema ? ema.data() : theta.data());
          last_inline_eval_s = st.now();
        }
      }
      applied = true;
    }

    return applied;
  };

  comm::IdleBackoff backoff;
  std::vector<MPI_Status> statuses;
  std::mt19937_64 rng(cfg.run.seed * 0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(self));
  while (done_workers < K || !eval_done) {
    bool progressed = false;
    const auto completed = comm::test_some(reqs, statuses);
    // Receives that completed together arrived in an order MPI does not
    // tell; take them in a seeded random order, so that the first-N cutoff
    // does not favour low worker numbers, and stamp them all with the time
    // they were seen.
    const double seen = st.now();
    std::vector<std::size_t> order(completed.size());
    for (std::size_t j = 0; j < order.size(); ++j) order[j] = j;
    std::shuffle(order.begin(), order.end(), rng);
    for (const std::size_t j : order) {
      const int i = completed[j];
      int bytes = 0;
      MPI_Get_count(&statuses[j], MPI_BYTE, &bytes);
      progressed = true;
      if (i == K) {  // the evaluator
        const comm::MsgHeader& h = eval_in.header();
        const std::string err = comm::check_header(
            h, {static_cast<std::uint32_t>(roles.evaluator_rank), {Kind::kEvalPull, Kind::kCtrl},
                static_cast<std::uint32_t>(self), 0, bytes});
        if (!err.empty()) protocol_error(self, err);
        if (static_cast<Kind>(h.kind) == Kind::kCtrl) {
          eval_done = true;
        } else {
          eval_waiting = true;
          eval_version = h.param_version;
          post(K);
        }
        continue;
      }
      const int w = i;
      const Message& m = inbox[static_cast<std::size_t>(w)];
      const comm::MsgHeader& h = m.header();
      const std::string err = comm::check_header(
          h, {static_cast<std::uint32_t>(roles.worker_rank(w)), {Kind::kGrad, Kind::kPull, Kind::kCtrl},
              static_cast<std::uint32_t>(self), count, bytes});
      if (!err.empty()) protocol_error(self, err);
      const auto kind = static_cast<Kind>(h.kind);
      if (kind == Kind::kCtrl) {
        done[static_cast<std::size_t>(w)] = 1;
        ++done_workers;
        continue;  // no more messages from this worker: do not repost
      }
      if (pending[static_cast<std::size_t>(w)].waiting) {
        protocol_error(self, "second request from worker rank " +
                                 std::to_string(roles.worker_rank(w)) +
                                 " before its previous one was answered");
      }
      if (kind == Kind::kGrad) {
        ++clock[static_cast<std::size_t>(w)];
        if (finished) {
          ++result.after_end;
        } else {
          core.on_grad(w, h.param_version, m.payload(), h.loss, h.compute_s, seen, h.step_seq);
        }
      }
      pending[static_cast<std::size_t>(w)] = {true, h.param_version};
      post(w);
      apply_due();
    }

    // Timeout mode: an update may fall due with no message at all.
    if (apply_due()) progressed = true;

    for (int w = 0; w < K; ++w) {
      if (pending[static_cast<std::size_t>(w)].waiting && may_reply(w)) {
        reply(w);
        progressed = true;
      }
    }
    if (eval_waiting && (finished || core.version() >= eval_version)) {
      if (eval_send != MPI_REQUEST_NULL) {
        std::vector<MPI_Request> one{eval_send};
        comm::wait_all(one);
      }
      auto& h = eval_out.header();
      h = comm::MsgHeader{};
      h.kind = static_cast<std::uint16_t>(Kind::kParams);
      h.sender = static_cast<std::uint32_t>(self);
      h.shard = static_cast<std::uint32_t>(self);
      h.param_version = core.version();
      h.step_seq = finished ? 1 : 0;  // 1: training has ended, these are final
      h.examples = examples;
      h.count = static_cast<std::uint32_t>(2 * count);
      std::copy(theta.begin(), theta.end(), eval_out.payload());
      std::copy(use_ema ? ema.data() : theta.data(), (use_ema ? ema.data() : theta.data()) + count,
                eval_out.payload() + count);
      SYNCOPT_CHECK_MPI(MPI_Isend(eval_out.data(), Message::wire_bytes(2 * count), MPI_BYTE,
                                  roles.evaluator_rank, comm::kTagToEvaluator, st.ctrl_comm,
                                  &eval_send));
      eval_waiting = false;
      progressed = true;
    }
    if (progressed) {
      backoff.busy();
    } else {
      backoff.idle(core.time_to_deadline(st.now()));
    }
  }

  if (has_eval && eval_notice_send == MPI_REQUEST_NULL) {
    // Finished before any update (nothing to train): the evaluator still
    // counts on one notice from every shard.
    auto& h = eval_notice.header();
    h = comm::MsgHeader{};
    h.kind = static_cast<std::uint16_t>(Kind::kStop);
    h.sender = static_cast<std::uint32_t>(self);
    h.shard = static_cast<std::uint32_t>(self);
    SYNCOPT_CHECK_MPI(MPI_Isend(eval_notice.data(), Message::wire_bytes(0), MPI_BYTE,
                                roles.evaluator_rank, comm::kTagEvalNotice, st.ctrl_comm,
                                &eval_notice_send));
  }
  // Drain: every reply must complete before the buffers go away.
  for (auto& s : snapshots) comm::wait_all(s.sends);
  comm::wait_all(stop_sends);
  if (eval_notice_send != MPI_REQUEST_NULL) {
    std::vector<MPI_Request> one{eval_notice_send};
    comm::wait_all(one);
  }
  if (eval_send != MPI_REQUEST_NULL) {
    std::vector<MPI_Request> one{eval_send};
    comm::wait_all(one);
  }
  result.steps = core.version();
  result.examples = examples;
  result.theta = std::move(theta);
  result.ema = use_ema ? std::vector<float>(ema.data(), ema.data() + count) : result.theta;
  if (result.after_end > 0) {
    spdlog::debug("shard {}: {} gradient(s) arrived after the last update", self,
                  result.after_end);
  }
  return result;
}

}  // namespace syncopt::ps
