// The parameter-server shard loop (see shard.hpp and docs/design.md §3, §4, §10).
#include "ps/shard.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <thread>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/parts.hpp"
#include "comm/protocol.hpp"
#include "common/bf16.hpp"
#include "common/finite.hpp"
#include "common/signals.hpp"

namespace syncopt::ps {

using comm::Kind;
using comm::kNoCheckpoint;
using comm::Message;

namespace {

// How long the loop sleeps at most between polls while some worker's
// gradient is partly in (comm::IdleBackoff's own cap is 500 us).
constexpr double kPartialPollS = 50e-6;

// A GRAD's phases of the worker's step, as its record carries them.
metrics::PhaseTimes phases_of(const comm::MsgHeader& h) {
  using metrics::Phase;
  metrics::PhaseTimes p;
  p.set(Phase::kData, h.data_s);
  if ((h.phase_flags & comm::kPhasesSplit) != 0) {
    p.set(Phase::kForward, h.forward_s);
    p.set(Phase::kBackward, h.backward_s);
  } else {
    p.set(Phase::kCompute, h.forward_s);
  }
  p.set(Phase::kWait, h.wait_s);
  p.set(Phase::kSend, h.send_s);
  return p;
}

}  // namespace

Shard::Shard(const ShardSetup& st)
    : m_st(st),
      m_cfg(*st.cfg),
      m_roles(*st.roles),
      m_self(st.shard),
      m_workers(st.roles->workers),
      m_count(st.slice.count),
      m_has_eval(st.roles->evaluator_rank >= 0),
      m_agree(st.roles->shards > 1 && config::traits(st.roles->mode).versioned &&
              st.cfg->train.clock != config::Clock::kVirtual && st.cfg->train.agree_shards),
      m_per_bucket(st.buckets.size() > 1 && (st.roles->mode == config::Mode::kAsync ||
                                             st.roles->mode == config::Mode::kSsp)),
      m_param_order(layout::BucketFlow::kParams,
                    static_cast<int>(std::max<std::size_t>(1, st.buckets.size()))),
      m_core(st.roles->mode, st.roles->workers, st.roles->rule.n, st.slice.count,
             st.cfg->train.timeout_ms / 1000.0, st.cfg->train.ssp_bound),
      m_params(optim::optimizer_options(st.cfg->optim), st.cfg->optim.ema, st.initial,
               st.slice.count),
      m_mean(st.slice.count),
      m_sched(optim::schedule_options(st.cfg->optim, st.plan->total_epochs)),
      m_data_sends(st.data_comm),
      m_ctrl_sends(st.ctrl_comm),
      m_pending(static_cast<std::size_t>(m_workers)),
      // Updates need N live workers (c in softsync), one in async and ssp,
      // and one with adaptive b, whose N follows the live workers down.
      m_roster(m_workers, config::traits(st.roles->mode).n_rule == config::NRule::kOne ||
                                  st.roles->rule.adaptive
                              ? 1
                              : st.roles->rule.n),
      m_flag(static_cast<std::size_t>(m_workers), 0),
      m_last_seq(static_cast<std::size_t>(m_workers), 0),
      m_eval_done(!m_has_eval),
      m_reported_by(st.shard),
      m_checkpoints(st.cfg->run, *st.roles, st.clock->now()),
      m_rng(st.cfg->run.seed * 0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(st.shard)) {
  m_wire_bf16 = st.cfg->exchange.wire == config::Precision::kBf16;
  for (const auto& b : st.buckets) m_buckets.push_back({b.offset, b.count});
  if (m_buckets.empty()) m_buckets.push_back({st.slice.offset, st.slice.count});
  std::size_t largest = 0;
  std::size_t end = st.slice.offset;
  for (const auto& b : m_buckets) {
    if (b.offset != end) throw InternalError("shard buckets do not tile the slice");
    end += b.count;
    largest = std::max(largest, b.count);
  }
  if (end != st.slice.offset + st.slice.count) {
    throw InternalError("shard buckets do not tile the slice");
  }
  const auto n_buckets = m_buckets.size();
  m_snapshots.resize(n_buckets);
  m_current.resize(n_buckets);
  m_grad_order.assign(
      static_cast<std::size_t>(m_workers),
      layout::BucketSequence(layout::BucketFlow::kGradient, static_cast<int>(n_buckets)));
  if (m_per_bucket) m_core.use_buckets(static_cast<int>(n_buckets));
  if (n_buckets > 1 && !m_per_bucket && m_core.slot(0) == nullptr) {
    m_staging.assign(static_cast<std::size_t>(m_workers), std::vector<float>(m_count));
  }
  std::vector<int> peers;
  for (int w = 0; w < m_workers; ++w) {
    m_recvs.add(m_roles.worker_rank(w), comm::kTagToShard, st.data_comm, largest);
    peers.push_back(m_roles.worker_rank(w));
  }
  if (m_has_eval) {
    m_eval_slot = m_recvs.add(m_roles.evaluator_rank, comm::kTagToShard, st.ctrl_comm, 0);
    peers.push_back(m_roles.evaluator_rank);
  }
  m_shard_slot.assign(static_cast<std::size_t>(m_roles.shards), -1);
  for (int s = 0; s < m_roles.shards; ++s) {
    if (s == m_self) continue;
    peers.push_back(s);
    // Shard 0 hears the others' SAVED and STOP_REQUEST; they hear its CHECKPOINT.
    if (m_self == 0) {
      m_shard_slot[static_cast<std::size_t>(s)] =
          m_recvs.add(s, comm::kTagToShard, st.ctrl_comm, 0);
    } else if (s == 0) {
      m_shard_slot[0] = m_recvs.add(0, comm::kTagCommand, st.ctrl_comm, 0);
    }
  }
  if (st.watch != nullptr) {
    m_watch = st.watch;
  } else {
    m_own_watch = std::make_unique<comm::Watch>(st.live_comm, m_self, peers, peers,
                                                m_cfg.cluster.dead_after_s, st.clock->now());
    m_watch = m_own_watch.get();
  }
  const bool virtual_clock = m_cfg.train.clock == config::Clock::kVirtual;
  if (virtual_clock) m_core.use_virtual_clock(m_cfg.sim.apply_ms / 1000.0);
  if (m_agree && m_self == 0) m_core.lead();
  if (m_roles.rule.adaptive && (m_self == 0 || virtual_clock)) {
    m_adaptive = std::make_unique<AdaptiveN>(m_workers, m_roles.rule.n);
  }
  if (m_agree && m_self != 0) {
    m_core.follow_leader();
    m_decision_slot =
        m_recvs.add(0, comm::kTagDecision, st.ctrl_comm, static_cast<std::size_t>(m_workers));
  }
  if (st.resume != nullptr) restore(*st.resume);
  if (done_training()) finish(ExitCode::kOk, "");
}

Shard::~Shard() = default;

ShardResult Shard::run() {
  for (int i = 0; i < m_recvs.size(); ++i) {
    if (i < m_workers && m_roster.is_lost(i)) continue;
    m_recvs.post(i);
  }
  while (keep_running()) {
    bool progressed = receive();
    check_liveness();
    coordinate();
    // Timeout mode: an update may fall due with no message at all.
    progressed = apply_due() || progressed;
    progressed = take_deferred_command() || progressed;
    progressed = answer_pulls() || progressed;
    progressed = serve_evaluator() || progressed;
    m_data_sends.progress();
    m_ctrl_sends.progress();
    if (progressed) {
      m_backoff.busy();
    } else if (m_st.own_core) {
      std::this_thread::yield();
    } else {
      const double now = m_st.clock->now();
      const double deadline = m_core.time_to_deadline(now);
      double limit = m_watch->time_to_next_deadline(now);
      if (deadline >= 0.0) limit = std::min(limit, deadline);
      // A gradient half in: its bucket 0 is on its way and an update may
      // hang on it, so look again soon rather than after a long sleep.
      if (std::any_of(m_grad_order.begin(), m_grad_order.end(),
                      [](const layout::BucketSequence& q) { return q.partial(); })) {
        limit = std::min(limit, kPartialPollS);
      }
      m_backoff.idle(limit);
    }
  }
  // Finished before any update (nothing to train): the evaluator still
  // counts on one notice from every shard.
  if (m_has_eval && !m_eval_notified) notify_evaluator();
  drain();

  ShardResult result;
  result.steps = m_core.version();
  result.examples = m_examples;
  result.after_end = m_after_end;
  result.code = m_code;
  result.detail = m_detail;
  result.lost_workers = m_roster.lost();
  result.dead_ranks = m_dead_ranks;
  result.ended_ranks = m_ended_ranks;
  result.reported_by = m_reported_by;
  result.ema.assign(m_params.average(), m_params.average() + m_count);
  result.theta = m_params.theta_vector();
  if (m_after_end > 0) {
    spdlog::debug("shard {}: {} gradient(s) arrived after the last update", m_self, m_after_end);
  }
  return result;
}

// Until every live worker and the evaluator have said goodbye, and the last
// checkpoint is saved (shard 0: committed; the others: their part written,
// unless shard 0 is gone).
bool Shard::keep_running() const {
  if (m_roster.any_active() || !m_eval_done) return true;
  if (m_self == 0) return m_checkpoints.saving() || (m_finished && !m_checkpoints.final_saved());
  return !m_checkpoints.final_saved() && m_watch->alive(0);
}

// Takes every receive that has completed. Receives that completed together
// arrived in an order MPI does not tell; they are taken in a seeded random
// order, so that the first-N cutoff does not favour low worker numbers, and
// all stamped with the time they were seen.
bool Shard::receive() {
  auto done = m_recvs.test();
  if (done.empty()) return false;
  const double seen = m_st.clock->now();
  std::shuffle(done.begin(), done.end(), m_rng);
  for (const auto& d : done) {
    m_watch->heard(m_recvs.source(d.slot), seen);
    if (d.slot < m_workers) {
      on_worker_message(d.slot, d.bytes, seen);
    } else if (d.slot == m_decision_slot) {
      on_decision(d.bytes);
    } else {
      on_peer_message(d.slot, d.bytes);
    }
  }
  return true;
}

// A follower: shard 0's choice of workers for one version.
void Shard::on_decision(int bytes) {
  const comm::MsgHeader& h = m_recvs.message(m_decision_slot).header();
  const std::string err = comm::check_header(h, {0,
                                                 {Kind::kDecision},
                                                 static_cast<std::uint32_t>(m_self),
                                                 static_cast<std::size_t>(m_workers),
                                                 bytes});
  if (!err.empty()) protocol_error(err);
  const float* p = m_recvs.message(m_decision_slot).payload();
  std::vector<int> workers(p, p + h.count);
  m_core.decide(h.param_version, std::move(workers));
  m_recvs.post(m_decision_slot);
  apply_due();
}

// Shard 0: which workers the update just applied averaged, to every live
// follower (one small message per shard and step: the cost of agreeing).
void Shard::send_decision(const metrics::StepRecord& rec) {
  std::vector<float> ids;
  for (const auto& g : rec.grads) {
    if (g.accepted && g.version == rec.version) ids.push_back(static_cast<float>(g.worker));
  }
  for (int s = 1; s < m_roles.shards; ++s) {
    if (!m_watch->alive(s)) continue;
    auto h = comm::make_header(Kind::kDecision, 0, s, rec.version);
    h.count = static_cast<std::uint32_t>(ids.size());
    auto msg = comm::make_message(ids.size(), h);
    std::copy(ids.begin(), ids.end(), msg->payload());
    m_ctrl_sends.send(std::move(msg), s, comm::kTagDecision);
  }
}

// The evaluator, or another shard (ctrl communicator).
void Shard::on_peer_message(int slot, int bytes) {
  const comm::MsgHeader& h = m_recvs.message(slot).header();
  const int from = m_recvs.source(slot);
  const bool evaluator = slot == m_eval_slot;
  const std::vector<Kind> kinds =
      evaluator ? std::vector<Kind>{Kind::kEvalPull, Kind::kCtrl, Kind::kSaved, Kind::kStopRequest}
      : m_self == 0 ? std::vector<Kind>{Kind::kSaved, Kind::kStopRequest}
                    : std::vector<Kind>{Kind::kCheckpoint};
  const std::string err = comm::check_header(
      h, {static_cast<std::uint32_t>(from), kinds, static_cast<std::uint32_t>(m_self), 0, bytes});
  if (!err.empty()) protocol_error(err);
  const auto kind = static_cast<Kind>(h.kind);
  if (kind == Kind::kCtrl) {
    m_eval_done = true;  // no more messages from it: do not repost
    m_watch->retire(from);
    return;
  }
  if (kind == Kind::kEvalPull) {
    m_eval_waiting = true;
    m_eval_version = h.param_version;
  } else if (kind == Kind::kSaved) {
    on_saved(from, h.step_seq);
  } else if (kind == Kind::kStopRequest && h.code != 0) {
    finish(static_cast<ExitCode>(h.code),
           "shard " + std::to_string(from) + " (" + rank_name(from) + ") failed; see its message");
  } else if (kind == Kind::kStopRequest) {
    request_stop(static_cast<int>(h.step_seq));
  } else if (kind == Kind::kCheckpoint) {
    on_checkpoint_command(h);
  }
  m_recvs.post(slot);
}

void Shard::on_worker_message(int w, int bytes, double seen) {
  const Message& m = m_recvs.message(w);
  const comm::MsgHeader& h = m.header();
  if (m_recvs.raw(w)) {
    // The payload of the GRAD whose header came last (kFlagSplit).
    if (bytes != static_cast<int>(comm::payload_bytes(h))) {
      protocol_error("gradient bucket from worker rank " + std::to_string(m_roles.worker_rank(w)) +
                     " of " + std::to_string(bytes) + " bytes, its header says " +
                     std::to_string(comm::payload_bytes(h)));
    }
    m_wire_bytes += static_cast<std::uint64_t>(bytes);
    // exchange.wire = bf16: widened before anything reads it (FP32 from here on).
    if ((h.flags & comm::kFlagBf16) != 0) m_recvs.widen_bf16(w, h.count);
    on_gradient(w, seen);
    return;
  }
  const std::string err = comm::check_header(
      h, {static_cast<std::uint32_t>(m_roles.worker_rank(w)),
          {Kind::kGrad, Kind::kPull, Kind::kCtrl, Kind::kSaved, Kind::kStopRequest},
          static_cast<std::uint32_t>(m_self),
          m_count,
          bytes,
          &m_buckets,
          m_wire_bf16});
  if (!err.empty()) protocol_error(err);
  const auto kind = static_cast<Kind>(h.kind);
  const auto wi = static_cast<std::size_t>(w);
  if (kind == Kind::kCtrl) {
    m_roster.done(w);
    m_core.retire(w);
    m_watch->retire(m_roles.worker_rank(w));
    // A part it never saved will not come (a well-behaved worker saves first).
    m_checkpoints.forget(m_roles.worker_rank(w));
    return;  // no more messages from this worker: do not repost
  }
  if (kind == Kind::kSaved || kind == Kind::kStopRequest) {
    if (kind == Kind::kSaved) on_saved(m_roles.worker_rank(w), h.step_seq);
    if (kind == Kind::kStopRequest) request_stop(static_cast<int>(h.step_seq));
    m_recvs.post(w);
    return;
  }
  if (kind == Kind::kGrad) {
    // A gradient's buckets come top layer first, bucket 0 last.
    layout::BucketSequence& order = m_grad_order[wi];
    if (h.bucket != order.next()) {
      protocol_error("gradient bucket " + std::to_string(h.bucket) + " from worker rank " +
                     std::to_string(m_roles.worker_rank(w)) + ", expected bucket " +
                     std::to_string(order.next()) + " (" + order.rule() + ")");
    }
    if (h.bucket == order.last() && m_pending[wi].waiting) {
      protocol_error("second request from worker rank " + std::to_string(m_roles.worker_rank(w)) +
                     " before its previous one was answered");
    }
    order.take(h.bucket);
    if ((h.flags & comm::kFlagSplit) != 0) {
      // The values follow; the header stays in the slot.
      m_recvs.post_payload(w, h.count, comm::element_bytes(h));
      return;
    }
    on_gradient(w, seen);
    return;
  }
  // A PULL asks for parameters (as bucket 0 of a gradient does).
  if (m_pending[wi].waiting) {
    protocol_error("second request from worker rank " + std::to_string(m_roles.worker_rank(w)) +
                   " before its previous one was answered");
  }
  m_pending[wi] = {true, h.param_version};
  m_recvs.post(w);
}

// A gradient bucket of worker w, its header and floats in the slot: staged
// or applied; bucket 0 completes the gradient and asks for parameters.
void Shard::on_gradient(int w, double seen) {
  const Message& m = m_recvs.message(w);
  const comm::MsgHeader& h = m.header();
  const float* data = m_recvs.payload(w);
  const auto wi = static_cast<std::size_t>(w);
  if (m_per_bucket) {
    apply_bucket(w, h, data);
  } else if (m_buckets.size() > 1) {
    stage(w, h, data);
  }
  if (!m_grad_order[wi].complete()) {
    m_recvs.post(w);
    return;
  }
  m_core.on_push(w);
  m_last_seq[wi] = h.step_seq;
  if (m_adaptive && !m_core.virtual_clock()) {
    // When it finished, from its version's start (late ones too). Under
    // the virtual clock the core says so, in the order it takes them.
    if (h.param_version == m_core.version()) {
      m_adaptive->on_arrival(h.param_version, seen - m_core.step_start());
    } else if (const auto it = m_version_start.find(h.param_version); it != m_version_start.end()) {
      m_adaptive->on_arrival(h.param_version, seen - it->second);
    }
  }
  if (m_finished) {
    ++m_after_end;
  } else {
    const float* grad = m_per_bucket ? nullptr : m_buckets.size() > 1 ? staging(w) : data;
    // The worker's phases (wall times: not under the virtual clock, whose
    // records are the same bits however the machine ran).
    if ((h.phase_flags & comm::kPhasesMeasured) != 0 && !m_core.virtual_clock()) {
      m_core.set_phases(w, h.step_seq, phases_of(h));
    }
    m_core.on_grad(w, h.param_version, grad, h.loss, h.compute_s, seen, h.step_seq, h.vtime_s,
                   h.examples);
  }
  m_pending[wi] = {true, h.param_version};
  m_recvs.post(w);
  // In async modes every gradient is its own update; in sync modes the
  // messages behind the N-th are judged against the new version.
  apply_due();
}

// Where worker w's gradient is assembled: the core's slot for it (sync,
// timeout), else this loop's own buffer (softsync).
float* Shard::staging(int w) {
  float* slot = m_core.slot(w);
  return slot != nullptr ? slot : m_staging[static_cast<std::size_t>(w)].data();
}

void Shard::stage(int w, const comm::MsgHeader& h, const float* data) {
  std::copy_n(data, h.count, staging(w) + (h.offset - m_st.slice.offset));
}

// Async and ssp, bucketed: the bucket is applied now, alone, with the lr
// of the epoch reached so far; its staleness goes into the gradient's
// record, written when bucket 0 completes it. Nothing non-finite is applied.
void Shard::apply_bucket(int w, const comm::MsgHeader& h, const float* data) {
  if (m_finished) return;
  if (!std::isfinite(h.loss) || !all_finite(data, h.count)) {
    finish(ExitCode::kInternal,
           "training diverged: a gradient of worker " + std::to_string(w) + " at shard " +
               std::to_string(m_self) + " (loss " + std::to_string(h.loss) +
               ") is not finite; nothing non-finite was applied or saved, the last checkpoint "
               "is kept. Lower optim.lr (asynchronous modes need a smaller one than sync)");
    return;
  }
  const double epoch = static_cast<double>(m_examples) / m_st.plan->train_count;
  const auto lr =
      static_cast<float>(optim::learning_rate(m_sched, epoch) * m_roles.rule.lr_multiplier(1));
  m_core.on_bucket(w, h.bucket, h.param_version);
  m_params.apply_range(h.offset - m_st.slice.offset, h.count, data, lr);
  m_current[h.bucket].reset();  // this bucket changed: the next answer publishes it anew
}

bool Shard::done_training() const { return would_finish(m_examples, m_core.version()); }

bool Shard::would_finish(std::uint64_t examples, std::uint64_t version) const {
  // train.epochs counts accepted examples (a timeout update may carry fewer
  // than N gradients, so the count of updates alone would end it early).
  return m_st.plan->target_examples > 0 ? examples >= m_st.plan->target_examples
                                        : version >= m_st.plan->total_steps;
}

bool Shard::apply_due() {
  bool applied = false;
  while (!m_finished && m_core.ready(m_st.clock->now())) {
    apply_one();
    applied = true;
  }
  return applied;
}

// One update of the gradients the core chose (async and ssp with buckets:
// already applied on arrival, bucket by bucket): the mean, the optimiser
// and the answers, bucket by bucket (apply_buckets), then the record
// (record_update).
void Shard::apply_one() {
  const double epoch = static_cast<double>(m_examples) / m_st.plan->train_count;
  metrics::StepRecord rec = m_core.begin_apply(m_st.clock->now());
  // Adaptive b: the lr follows the N this update averages (scale_lr_by_n).
  const auto lr = static_cast<float>(optim::learning_rate(m_sched, epoch) *
                                     m_roles.rule.lr_multiplier(rec.used));
  if (m_agree && m_self == 0) send_decision(rec);
  if (!std::isfinite(rec.loss)) {
    return diverged(rec, lr, "the mean loss is " + std::to_string(rec.loss));
  }
  const std::uint64_t examples = m_examples + static_cast<std::uint64_t>(rec.used) *
                                                  static_cast<std::uint64_t>(m_cfg.train.batch);
  if (m_per_bucket) {
    m_core.end_apply();
    m_params.end_update();  // every bucket was applied on arrival
  } else if (!apply_buckets(rec, lr, would_finish(examples, m_core.version()))) {
    return;
  }
  m_examples = examples;
  record_update(rec, lr);
}

// The update ends here without touching what is left: nothing non-finite
// is applied or saved, the last checkpoint stays.
void Shard::diverged(const metrics::StepRecord& rec, float lr, const std::string& what) {
  m_core.end_apply();
  finish(ExitCode::kInternal,
         "training diverged at update " + std::to_string(rec.step) + ", shard " +
             std::to_string(m_self) + ": " + what + " (lr " + std::to_string(lr) +
             "); nothing non-finite was applied or saved, the last checkpoint is kept. Lower "
             "optim.lr (asynchronous modes need a smaller one than sync: each update is one "
             "worker's batch, and stale)");
}

// Bucket by bucket in forward order: the mean, the optimiser, and the
// bucket's new parameters at once to the workers waiting for this version
// (not after the last update, `last`: those get STOP), so that their
// forward starts while the layers above are still being updated.
// Element-wise, so the same bits as one pass. False: a bucket's mean was
// not finite and the update ended there (diverged).
bool Shard::apply_buckets(const metrics::StepRecord& rec, float lr, bool last) {
  const std::vector<int> answer = m_buckets.size() > 1 && !last ? answerable() : std::vector<int>{};
  for (auto& c : m_current) c.reset();  // parameters change: answers publish anew
  for (const int j : m_param_order.order()) {
    const auto b = static_cast<std::size_t>(j);
    if (!mean_of_bucket(b)) {
      // The buckets before this one are applied (and on their way to the
      // workers above, which get STOP next).
      diverged(rec, lr,
               "the mean gradient of " + std::to_string(m_buckets[b].count) + " parameters from " +
                   std::to_string(m_buckets[b].offset) + " is not finite");
      return false;
    }
    optimise_bucket(b, lr);
    for (const int w : answer) send_params(w, j);
  }
  m_core.end_apply();
  m_params.end_update();
  for (const int w : answer) {
    m_pending[static_cast<std::size_t>(w)].waiting = false;
    m_flag[static_cast<std::size_t>(w)] = 0;
    m_core.answered(w);  // the virtual clock's worker computes again from here
  }
  return true;
}

// The workers whose request the version being applied answers.
std::vector<int> Shard::answerable() const {
  std::vector<int> answer;
  for (int w = 0; w < m_workers; ++w) {
    const Pending& p = m_pending[static_cast<std::size_t>(w)];
    if (p.waiting && !m_roster.is_lost(w) && m_core.may_answer(w, p.version)) answer.push_back(w);
  }
  return answer;
}

// Bucket b's mean gradient into m_mean (its place in the slice); false
// when it is not finite.
bool Shard::mean_of_bucket(std::size_t b) {
  const std::size_t at = m_buckets[b].offset - m_st.slice.offset;
  return m_core.average(m_mean.data(), at, m_buckets[b].count);
}

// The optimiser on bucket b, from its mean in m_mean.
void Shard::optimise_bucket(std::size_t b, float lr) {
  const std::size_t at = m_buckets[b].offset - m_st.slice.offset;
  m_params.apply_range(at, m_buckets[b].count, m_mean.data() + at, lr);
}

// After an update is applied: its step record, adaptive b, the end of
// training, the progress line and evaluation in place.
void Shard::record_update(metrics::StepRecord& rec, float lr) {
  rec.shard = m_self;
  rec.lr = lr;
  if (!m_core.virtual_clock()) {
    rec.t_apply = m_st.clock->now();  // after the optimiser: the next step starts here
    m_core.set_step_start(rec.t_apply);
  }
  if (m_roles.rule.adaptive) rec.n = rec.used;
  if (m_adaptive && m_core.virtual_clock()) {
    for (const auto& [version, at] : m_core.take_arrivals()) m_adaptive->on_arrival(version, at);
  }
  if (m_adaptive) adapt(rec);
  for (auto& c : m_current) c.reset();  // parameters changed: the next answer publishes anew
  // Which record a message's bytes fall into depends on timing: left out
  // under the virtual clock, whose records are the same bits however the
  // messages were timed.
  if (!m_core.virtual_clock()) rec.wire_bytes = m_wire_bytes - m_wire_recorded;
  m_wire_recorded = m_wire_bytes;
  m_st.steps_log->write(rec);
  if (done_training()) finish(ExitCode::kOk, "");
  if (m_st.on_update) m_st.on_update(m_core.version(), m_examples, rec.loss);
  if (m_st.inline_eval && !m_finished) {
    m_st.inline_eval(m_core.version(), m_examples, m_params.theta(), m_params.average());
  }
}

// Adaptive b: what this update said about arrival times, and the N of the next.
void Shard::adapt(const metrics::StepRecord& rec) {
  double last = 0.0;
  for (const auto& g : rec.grads) {
    if (g.accepted) last = std::max(last, g.arrival_s);
  }
  m_version_start[rec.version] = rec.t_start;
  while (m_version_start.size() > 8) m_version_start.erase(m_version_start.begin());
  m_adaptive->on_applied(rec.version, std::max(0.0, rec.t_apply - rec.t_start - last));
  if (m_adaptive->n() != m_core.n()) {
    if (m_self == 0) {
      spdlog::info("adaptive b: N {} -> {} of {} workers at step {}", m_core.n(), m_adaptive->n(),
                   m_workers, rec.step);
    }
    m_core.set_n(m_adaptive->n());
  }
}

// A bucket of the current version as a message, published once and sent
// to any number of workers; a buffer is reused once no send from it is in
// flight.
const comm::SharedMessage& Shard::publish(int bucket) {
  const auto b = static_cast<std::size_t>(bucket);
  if (m_current[b]) return m_current[b];
  m_data_sends.progress();
  auto& pool = m_snapshots[b];
  const comm::BucketSpan& span = m_buckets[b];
  auto free = std::find_if(pool.begin(), pool.end(),
                           [](const comm::SharedMessage& m) { return m.use_count() == 1; });
  if (free == pool.end()) {
    pool.push_back(std::make_shared<Message>(span.count));
    free = pool.end() - 1;
  }
  Message& msg = **free;
  auto& h = msg.header();
  h = comm::make_header(Kind::kParams, m_self, m_self, m_core.bucket_version(bucket));
  h.count = static_cast<std::uint32_t>(span.count);
  h.flags = comm::kFlagSplit | (m_wire_bf16 ? comm::kFlagBf16 : 0u);
  h.offset = static_cast<std::uint32_t>(span.offset);
  h.vtime_s = m_core.step_start();  // the virtual clock's worker starts from it
  h.bucket = static_cast<std::uint16_t>(bucket);
  h.buckets = static_cast<std::uint16_t>(m_buckets.size());
  const float* theta = m_params.theta() + (span.offset - m_st.slice.offset);
  if (m_wire_bf16) {
    // Rounded to nearest even into the first half of the payload.
    bf16::encode(theta, span.count, reinterpret_cast<std::uint16_t*>(msg.payload()));
  } else {
    std::copy_n(theta, span.count, msg.payload());
  }
  m_current[b] = *free;
  return m_current[b];
}

// One bucket of the current version to worker w; a checkpoint flag rides
// on bucket 0 (the caller clears it once every bucket is sent).
void Shard::send_params(int w, int bucket) {
  const int rank = m_roles.worker_rank(w);
  const auto wi = static_cast<std::size_t>(w);
  // The floats follow the header apart, so that they land in place.
  const comm::SharedMessage& msg = publish(bucket);
  m_wire_bytes += comm::payload_bytes(msg->header());
  if (bucket == 0 && m_flag[wi] != 0) {
    // This worker saves its state before computing on these parameters:
    // its own copy of the header, flagged.
    auto flagged = std::make_shared<Message>(0);
    flagged->header() = msg->header();
    flagged->header().flags |= comm::kFlagCheckpoint;
    flagged->header().step_seq = m_flag[wi];
    m_data_sends.send_split(std::move(flagged), msg, msg->payload(), rank, comm::kTagToWorker);
    return;
  }
  m_data_sends.send_split(msg, msg, msg->payload(), rank, comm::kTagToWorker);
}

bool Shard::answer_pulls() {
  bool answered = false;
  for (int w = 0; w < m_workers; ++w) {
    const auto wi = static_cast<std::size_t>(w);
    Pending& p = m_pending[wi];
    if (!p.waiting || m_roster.is_lost(w) || !(m_finished || m_core.may_answer(w, p.version))) {
      continue;
    }
    const int rank = m_roles.worker_rank(w);
    if (m_finished) {
      if (!m_stop) {
        auto h = comm::make_header(Kind::kStop, m_self, m_self, m_core.version());
        h.code = static_cast<std::uint32_t>(m_code);
        if (!m_dead_ranks.empty()) h.flags |= comm::kFlagPeerLost;
        if (m_checkpoints.saving_final()) {
          h.flags |= comm::kFlagCheckpoint;
          h.step_seq = m_checkpoints.step();
        }
        m_stop = comm::make_message(0, h);
      }
      m_data_sends.send(m_stop, rank, comm::kTagToWorker);
    } else {
      for (const int b : m_param_order.order()) send_params(w, b);
      m_flag[wi] = 0;
    }
    p.waiting = false;
    answered = true;
    m_core.answered(w);
  }
  return answered;
}

bool Shard::serve_evaluator() {
  if (!m_eval_waiting || !(m_finished || m_core.version() >= m_eval_version)) return false;
  auto h = comm::make_header(Kind::kParams, m_self, m_self, m_core.version());
  h.flags = m_finished ? comm::kFlagFinal : 0;
  h.examples = m_examples;
  h.count = static_cast<std::uint32_t>(2 * m_count);
  auto msg = comm::make_message(2 * m_count, h);
  std::copy_n(m_params.theta(), m_count, msg->payload());
  const float* avg = m_params.average();
  std::copy(avg, avg + m_count, msg->payload() + m_count);
  m_ctrl_sends.send(std::move(msg), m_roles.evaluator_rank, comm::kTagToEvaluator);
  m_eval_waiting = false;
  return true;
}

// Wakes the evaluator from its wait: training has ended.
void Shard::notify_evaluator() {
  if (!m_watch->alive(m_roles.evaluator_rank)) return;
  auto h = comm::make_header(Kind::kStop, m_self, m_self, m_core.version());
  h.code = static_cast<std::uint32_t>(m_code);
  if (!m_dead_ranks.empty()) h.flags |= comm::kFlagPeerLost;
  m_ctrl_sends.send(comm::make_message(0, h), m_roles.evaluator_rank, comm::kTagEvalNotice);
  m_eval_notified = true;
}

// Training ends here: completed, stopped by a signal, or failed. The first
// reason is the one recorded.
void Shard::finish(ExitCode code, const std::string& detail, int reporter) {
  if (m_finished) return;
  m_finished = true;
  m_code = code;
  m_detail = detail;
  m_reported_by = reporter >= 0 ? reporter : m_self;
  m_stop.reset();
  if (code != ExitCode::kOk && code != ExitCode::kPreempted) spdlog::error("{}", detail);
  if (m_has_eval) notify_evaluator();
  // A failure found here ends the run everywhere: shard 0 decides for all.
  if (m_self != 0 && code != ExitCode::kOk && code != ExitCode::kPreempted && m_watch->alive(0)) {
    auto h = comm::make_header(Kind::kStopRequest, m_self, 0);
    h.code = static_cast<std::uint32_t>(code);
    m_ctrl_sends.send(comm::make_message(0, h), 0, comm::kTagToShard);
  }
}

// Every answer must complete before the buffers go away; to a peer that
// died, they are cancelled (or kept) rather than waited for.
void Shard::drain() {
  const double limit = m_cfg.cluster.dead_after_s;
  if (!m_data_sends.drain(limit) || !m_ctrl_sends.drain(limit)) {
    spdlog::warn("shard {}: some messages to other ranks were not received within {}s", m_self,
                 limit);
  }
}

std::string Shard::rank_name(int rank) const { return comm::describe_rank(*m_st.peers, rank); }

void Shard::protocol_error(const std::string& what) const {
  throw InternalError("parameter-server shard " + std::to_string(m_self) + " rejected a " + what +
                      " (nothing was applied; check that every rank runs the same syncopt "
                      "binary and config)");
}

// ------------------------------------------------------------------- liveness

void Shard::check_liveness() {
  const double now = m_st.clock->now();
  const auto dead = m_watch->poll(now);
  for (const auto& n : m_watch->notices()) {
    if (n.kind == Kind::kEnding) on_ending(n);
  }
  for (const int rank : dead) {
    m_dead_ranks.push_back(rank);
    if (rank >= m_roles.first_worker) {
      lose_worker(m_roles.worker_of(rank), now);
      continue;
    }
    const bool evaluator = rank == m_roles.evaluator_rank;
    const std::string who =
        (evaluator ? "the evaluator, " : "shard " + std::to_string(rank) + ", ") + rank_name(rank);
    if (m_finished) {
      // The run ended already (said once); finish() below says nothing more.
      spdlog::warn("{} has been silent for {:.0f}s (cluster.dead_after_s): it is dead", who,
                   now - m_watch->last_heard(rank));
    }
    if (evaluator) {
      m_eval_done = true;
      m_eval_waiting = false;
      m_recvs.cancel(m_eval_slot);
      m_ctrl_sends.cancel_to(rank);
      m_checkpoints.forget(rank);
    } else {
      const int slot = m_shard_slot[static_cast<std::size_t>(rank)];
      if (slot >= 0) m_recvs.cancel(slot);
      m_ctrl_sends.cancel_to(rank);
      m_checkpoints.abandon();  // a checkpoint without a shard's part is no checkpoint
      m_checkpoints.set_final_saved();
    }
    finish(ExitCode::kUnavailable,
           who + " is dead (silent for " +
               std::to_string(static_cast<int>(now - m_watch->last_heard(rank))) +
               "s): the run cannot go on without it");
  }
}

// A peer ended the job, or its part in it, and said why (an error of its
// own, or a rank it cannot go on without): it is gone, but not lost.
void Shard::on_ending(const comm::Notice& n) {
  const int from = n.from;
  const auto code = static_cast<ExitCode>(n.code);
  std::string dead;
  for (const int r : n.ranks) dead += (dead.empty() ? "" : ", ") + rank_name(r);
  const std::string why = dead.empty() ? "an error of its own" : "it found " + dead + " silent";
  if (from == 0 && m_self != 0) {
    throw EndedByPeerError(code, "ends with exit " + std::to_string(n.code) + ": shard 0 (" +
                                     rank_name(0) + ") ended the run; see its message");
  }
  std::string who;
  if (from >= m_roles.first_worker) {
    const int w = m_roles.worker_of(from);
    who = "worker " + std::to_string(w) + " (" + rank_name(from) + ")";
    if (m_roster.active(w)) m_roster.done(w);
    m_pending[static_cast<std::size_t>(w)].waiting = false;
    m_flag[static_cast<std::size_t>(w)] = 0;
    m_core.retire(w);
    m_recvs.cancel(w);
    m_data_sends.cancel_to(from);
  } else if (from == m_roles.evaluator_rank) {
    who = "the evaluator (" + rank_name(from) + ")";
    m_eval_done = true;
    m_eval_waiting = false;
    m_recvs.cancel(m_eval_slot);
    m_ctrl_sends.cancel_to(from);
  } else {
    who = "shard " + std::to_string(from) + " (" + rank_name(from) + ")";
    const int slot = m_shard_slot[static_cast<std::size_t>(from)];
    if (slot >= 0) m_recvs.cancel(slot);
    m_ctrl_sends.cancel_to(from);
    m_checkpoints.abandon();  // a checkpoint without a shard's part is no checkpoint
    m_checkpoints.set_final_saved();
  }
  m_watch->retire(from);
  m_checkpoints.forget(from);
  m_ended_ranks.push_back(from);
  if (!m_finished && !n.ranks.empty()) {
    // The cause is the rank it found silent: said here, once (it says one line).
    std::string lost;
    for (const int r : n.ranks) {
      lost += (lost.empty() ? "" : ", ") +
              (r == m_roles.evaluator_rank ? std::string("the evaluator, ")
               : r < m_roles.first_worker  ? "shard " + std::to_string(r) + ", "
                                           : std::string()) +
              rank_name(r);
    }
    finish(code, lost + " is dead (" + who + " found it silent): the run cannot go on without it",
           from);
  } else if (!m_finished) {
    finish(code,
           who + " ended with exit " + std::to_string(n.code) + " (" + why +
               "); the run cannot go on; see its message",
           from);
  } else if (m_self == 0) {
    spdlog::info("{} ended with exit {} after training had ended ({})", who, n.code, why);
  }
}

void Shard::lose_worker(int w, double now) {
  const auto wi = static_cast<std::size_t>(w);
  const int rank = m_roles.worker_rank(w);
  m_pending[wi].waiting = false;
  m_flag[wi] = 0;
  // A gradient it was sending will not be completed.
  m_grad_order[wi].reset();
  m_core.retire(w);
  m_recvs.cancel(w);
  m_data_sends.cancel_to(rank);
  m_checkpoints.forget(rank);
  const double silent = now - m_watch->last_heard(rank);
  const auto& peer = (*m_st.peers)[static_cast<std::size_t>(rank)];
  m_roster.lose(w, {{"worker", w},
                    {"rank", rank},
                    {"host", peer.host},
                    {"pid", peer.pid},
                    {"step", m_core.version()},
                    {"last_gradient", m_last_seq[wi]},
                    {"reason", "silent for " + std::to_string(static_cast<int>(silent)) +
                                   "s (cluster.dead_after_s = " +
                                   std::to_string(m_cfg.cluster.dead_after_s) + ")"}});
  const int live = m_roster.live();
  if (m_adaptive) {
    m_adaptive->set_live(live);
    m_core.set_n(m_adaptive->n());
  }
  if (m_self == 0) {
    spdlog::warn(
        "worker {} ({}) has been silent for {:.0f}s at step {}: excluded, {} of {} "
        "workers live, {} needed",
        w, rank_name(rank), silent, m_core.version(), live, m_workers, m_roster.needed());
  }
  if (!m_finished && !m_roster.enough()) {
    std::string lost;
    for (const auto& l : m_roster.lost())
      lost += (lost.empty() ? "" : ", ") + rank_name(l["rank"].get<int>());
    finish(ExitCode::kUnavailable,
           "only " + std::to_string(live) + " of " + std::to_string(m_workers) +
               " workers are alive and this mode needs " + std::to_string(m_roster.needed()) +
               " (lost: " + lost +
               "); the run cannot go on. A checkpoint is saved: resume with "
               "replacement ranks and --set run.resume=true, or with the ranks left and "
               "--set run.reshape=true too (scripts/run.sh does it with "
               "SYNCOPT_MAX_RESTARTS)");
  }
}

// ---------------------------------------------------------------- checkpoints

// A stop signal here or anywhere: shard 0 stops at the next step boundary;
// the others tell shard 0 (once).
void Shard::request_stop(int sig) {
  if (m_stop_signal != 0 || sig == 0) return;
  m_stop_signal = sig;
  if (m_self == 0) return;  // coordinate() acts on it
  if (!m_watch->alive(0)) return;
  auto h = comm::make_header(Kind::kStopRequest, m_self, 0);
  h.step_seq = static_cast<std::uint64_t>(sig);
  m_ctrl_sends.send(comm::make_message(0, h), 0, comm::kTagToShard);
}

void Shard::coordinate() {
  request_stop(stop_signal());
  if (m_self != 0) return;
  if (m_stop_signal != 0 && !m_finished) {
    finish(ExitCode::kPreempted,
           signal_name(m_stop_signal) + " at step " + std::to_string(m_core.version()));
    spdlog::info("stopping at step {} on {}: saving a checkpoint", m_core.version(),
                 signal_name(m_stop_signal));
  }
  if (m_finished && !m_checkpoints.final_saved() && !m_checkpoints.saving_final()) {
    if (m_checkpoints.saving()) {
      spdlog::info("checkpoint {} abandoned: the run ended first", m_checkpoints.step());
      m_checkpoints.abandon();
    }
    if (m_code == ExitCode::kInternal) {
      // Diverged: the last finite checkpoint stays the latest; the others
      // are told to end without saving.
      m_checkpoints.set_final_saved();
      end_others_unsaved();
    } else {
      begin_checkpoint(true);
    }
  } else if (!m_finished && m_checkpoints.due(m_core.version(), m_st.clock->now())) {
    begin_checkpoint(false);
  }
  commit_if_complete();
}

// Shard 0: tells the other shards and the evaluator that the run ends with
// no checkpoint to write (diverged, or the latest is this step already).
void Shard::end_others_unsaved() {
  auto h = comm::make_header(Kind::kCheckpoint, 0, 0);
  h.step_seq = kNoCheckpoint;
  h.code = static_cast<std::uint32_t>(m_code);
  h.flags = comm::kFlagFinal;
  for (int s = 1; s < m_roles.shards; ++s) {
    if (!m_watch->alive(s)) continue;
    auto hs = h;
    hs.shard = static_cast<std::uint32_t>(s);
    m_ctrl_sends.send(comm::make_message(0, hs), s, comm::kTagCommand);
  }
  if (m_has_eval && m_watch->alive(m_roles.evaluator_rank) && !m_eval_done) {
    m_ctrl_sends.send(comm::make_message(0, h), m_roles.evaluator_rank, comm::kTagCommand);
  }
}

// Shard 0: the parts every live rank writes for checkpoint `version`.
void Shard::begin_checkpoint(bool final) {
  const std::uint64_t step = m_core.version();
  const double now = m_st.clock->now();
  if (checkpoint::latest_step(m_st.run_dir) == step) {  // already on disk (just resumed)
    m_checkpoints.already_saved(final, now);
    // Resumed at the last step: the other shards and the evaluator still
    // wait for the final command (before, shard 1 of 2 waited until shard 0
    // was gone, and rank 0 reported its final slice and records missing).
    if (final) end_others_unsaved();
    return;
  }
  checkpoint::write_part(m_st.run_dir, step, checkpoint::shard_part(0), part_state());
  auto h = comm::make_header(Kind::kCheckpoint, 0, 0);
  h.step_seq = step;
  h.code = static_cast<std::uint32_t>(m_code);
  h.flags = final ? comm::kFlagFinal : 0;
  std::vector<int> ranks;
  for (int s = 1; s < m_roles.shards; ++s) {
    if (!m_watch->alive(s)) continue;
    ranks.push_back(s);
    auto hs = h;
    hs.shard = static_cast<std::uint32_t>(s);
    m_ctrl_sends.send(comm::make_message(0, hs), s, comm::kTagCommand);
  }
  if (m_has_eval && m_watch->alive(m_roles.evaluator_rank) && !m_eval_done) {
    ranks.push_back(m_roles.evaluator_rank);
    m_ctrl_sends.send(comm::make_message(0, h), m_roles.evaluator_rank, comm::kTagCommand);
  }
  for (int w = 0; w < m_workers; ++w) {
    const auto wi = static_cast<std::size_t>(w);
    if (!m_roster.active(w)) continue;
    ranks.push_back(m_roles.worker_rank(w));
    if (!final) m_flag[wi] = step;  // the final one rides on STOP
  }
  m_checkpoints.begin(step, final, now, ranks);
  m_stop.reset();  // a STOP built before this is not flagged
}

// Another shard: shard 0 asks for this shard's part. A follower that has
// not applied that step yet (shard 0 decided it and moved on, while this
// shard still waits for the decision or a gradient) answers once it has:
// its part, and its final parameters, must be of the same step as shard
// 0's. (Seen as a last update missing from shard 1's records when the
// machine was loaded.)
void Shard::on_checkpoint_command(const comm::MsgHeader& h) {
  const std::uint64_t step = h.step_seq;
  if (m_agree && step != kNoCheckpoint && m_core.version() < step) {
    m_deferred_command = h;
    m_deferred_since = m_st.clock->now();
    return;
  }
  answer_checkpoint(h);
}

// This shard's part of checkpoint h.step_seq, SAVED to shard 0; the end
// of this shard's training when the command is the final one.
void Shard::answer_checkpoint(const comm::MsgHeader& h) {
  const std::uint64_t step = h.step_seq;
  if (step != kNoCheckpoint) {
    if (checkpoint::latest_step(m_st.run_dir) != step) {
      checkpoint::write_part(m_st.run_dir, step, checkpoint::shard_part(m_self), part_state());
    }
    auto saved = comm::make_header(Kind::kSaved, m_self, 0);
    saved.step_seq = step;
    m_ctrl_sends.send(comm::make_message(0, saved), 0, comm::kTagToShard);
  }
  if ((h.flags & comm::kFlagFinal) != 0) {
    m_checkpoints.set_final_saved();
    const auto code = static_cast<ExitCode>(h.code);
    finish(code, "shard 0 ended the run");
  }
}

// The deferred CHECKPOINT, once this shard reached its step; after
// cluster.dead_after_s without (a worker whose gradient it waits for
// died?) it is answered as things are, with a warning.
bool Shard::take_deferred_command() {
  if (!m_deferred_command) return false;
  const comm::MsgHeader h = *m_deferred_command;
  const bool reached = m_core.version() >= h.step_seq;
  if (!reached) {
    if (m_st.clock->now() - m_deferred_since < m_cfg.cluster.dead_after_s) return false;
    spdlog::warn(
        "shard {}: saving its part of checkpoint {} at update {}: the rest of that "
        "update did not arrive within cluster.dead_after_s",
        m_self, h.step_seq, m_core.version());
  }
  m_deferred_command.reset();
  answer_checkpoint(h);
  return true;
}

void Shard::on_saved(int rank, std::uint64_t step) { m_checkpoints.on_saved(rank, step); }

void Shard::commit_if_complete() {
  if (!m_checkpoints.complete()) return;
  const double t0 = m_st.clock->now();
  const std::uint64_t step = m_checkpoints.step();
  const auto manifest =
      checkpoint::commit(m_st.run_dir, step, m_checkpoints.finish_save(), m_st.checkpoint_stamp);
  checkpoint::prune(m_st.run_dir, static_cast<std::size_t>(m_cfg.run.keep_checkpoints));
  std::uint64_t nbytes = 0;
  for (const auto& f : manifest.files) nbytes += f.nbytes;
  spdlog::info("checkpoint at step {}: {} parts, {:.1f} MB (commit {:.3f}s)", step,
               manifest.files.size(), static_cast<double>(nbytes) / 1e6, m_st.clock->now() - t0);
}

checkpoint::State Shard::part_state() const {
  if (!all_finite(m_params.theta(), m_count)) {
    throw Error(ExitCode::kInternal, "shard " + std::to_string(m_self) +
                                         " holds non-finite parameters; no checkpoint is saved");
  }
  checkpoint::State s = m_params.state();
  s.put_child("core", m_core.state());
  s.put("examples", m_examples);
  s.put("wall_s", m_st.clock->now());
  m_st.steps_log->flush();
  if (m_self == 0) {
    s.put("steps_bytes", m_st.steps_log->bytes());
    if (m_st.eval_file != nullptr) {
      m_st.eval_file->flush();
      s.put("eval_bytes", m_st.eval_file->bytes());
    }
  } else {
    s.put("records", m_st.steps_log->buffered());
  }
  return s;
}

void Shard::restore(const checkpoint::State& s) {
  m_params.restore(s, "model and cluster.ps");
  m_core.restore(s.child("core"));
  m_examples = s.get<std::uint64_t>("examples");
  if (m_self != 0) m_st.steps_log->restore_buffer(s.get<std::string>("records"));
  m_checkpoints.resumed_at(m_core.version());
}

}  // namespace syncopt::ps
