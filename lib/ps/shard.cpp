// The parameter-server shard loop (see shard.hpp and DESIGN.md §3-§4).
#include "ps/shard.hpp"

#include <algorithm>
#include <cmath>

#include <spdlog/spdlog.h>

#include "comm/protocol.hpp"
#include "common/error.hpp"

namespace syncopt::ps {

using comm::Kind;
using comm::Message;

Shard::Shard(const ShardSetup& st)
    : m_st(st), m_cfg(*st.cfg), m_roles(*st.roles), m_self(st.shard), m_workers(st.roles->workers),
      m_count(st.slice.count), m_has_eval(st.roles->evaluator_rank >= 0),
      m_use_ema(st.cfg->optim.ema > 0.0),
      m_core(st.roles->mode, st.roles->workers, st.roles->n, st.slice.count,
             st.cfg->train.timeout_ms / 1000.0, st.cfg->train.ssp_bound),
      m_theta(st.initial, st.initial + st.slice.count), m_mean(st.slice.count),
      m_opt(optim::optimizer_options(st.cfg->optim), st.slice.count),
      m_ema(m_use_ema ? st.cfg->optim.ema : 0.0, m_theta.data(), st.slice.count),
      m_sched(optim::schedule_options(st.cfg->optim, st.plan->total_epochs,
                                      st.plan->lr_multiplier)),
      m_data_sends(st.data_comm), m_ctrl_sends(st.ctrl_comm),
      m_pending(static_cast<std::size_t>(m_workers)), m_done(static_cast<std::size_t>(m_workers), 0),
      m_eval_done(!m_has_eval),
      m_rng(st.cfg->run.seed * 0x9e3779b97f4a7c15ULL + static_cast<std::uint64_t>(st.shard)) {
  for (int w = 0; w < m_workers; ++w) {
    m_recvs.add(m_roles.worker_rank(w), comm::kTagToShard, st.data_comm, m_count);
  }
  if (m_has_eval) m_recvs.add(m_roles.evaluator_rank, comm::kTagToShard, st.ctrl_comm, 0);
  m_finished = done_training();
}

Shard::~Shard() = default;

ShardResult Shard::run() {
  for (int i = 0; i < m_recvs.size(); ++i) m_recvs.post(i);
  while (m_done_workers < m_workers || !m_eval_done) {
    bool progressed = receive();
    // Timeout mode: an update may fall due with no message at all.
    progressed = apply_due() || progressed;
    progressed = answer_pulls() || progressed;
    progressed = serve_evaluator() || progressed;
    m_data_sends.progress();
    m_ctrl_sends.progress();
    if (progressed) {
      m_backoff.busy();
    } else {
      m_backoff.idle(m_core.time_to_deadline(m_st.clock->now()));
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
  result.ema = m_use_ema ? std::vector<float>(m_ema.data(), m_ema.data() + m_count) : m_theta;
  result.theta = std::move(m_theta);
  if (m_after_end > 0) {
    spdlog::debug("shard {}: {} gradient(s) arrived after the last update", m_self, m_after_end);
  }
  return result;
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
    if (d.slot == m_workers) {
      on_evaluator_message(d.bytes);
    } else {
      on_worker_message(d.slot, d.bytes, seen);
    }
  }
  return true;
}

void Shard::on_evaluator_message(int bytes) {
  const comm::MsgHeader& h = m_recvs.message(m_workers).header();
  const std::string err = comm::check_header(
      h, {static_cast<std::uint32_t>(m_roles.evaluator_rank), {Kind::kEvalPull, Kind::kCtrl},
          static_cast<std::uint32_t>(m_self), 0, bytes});
  if (!err.empty()) protocol_error(err);
  if (static_cast<Kind>(h.kind) == Kind::kCtrl) {
    m_eval_done = true;  // no more messages from it: do not repost
    return;
  }
  m_eval_waiting = true;
  m_eval_version = h.param_version;
  m_recvs.post(m_workers);
}

void Shard::on_worker_message(int w, int bytes, double seen) {
  const Message& m = m_recvs.message(w);
  const comm::MsgHeader& h = m.header();
  const std::string err = comm::check_header(
      h, {static_cast<std::uint32_t>(m_roles.worker_rank(w)),
          {Kind::kGrad, Kind::kPull, Kind::kCtrl}, static_cast<std::uint32_t>(m_self), m_count,
          bytes});
  if (!err.empty()) protocol_error(err);
  const auto kind = static_cast<Kind>(h.kind);
  const auto wi = static_cast<std::size_t>(w);
  if (kind == Kind::kCtrl) {
    m_done[wi] = 1;
    ++m_done_workers;
    m_core.retire(w);
    return;  // no more messages from this worker: do not repost
  }
  if (m_pending[wi].waiting) {
    protocol_error("second request from worker rank " + std::to_string(m_roles.worker_rank(w)) +
                   " before its previous one was answered");
  }
  if (kind == Kind::kGrad) {
    m_core.on_push(w);
    if (m_finished) {
      ++m_after_end;
    } else {
      m_core.on_grad(w, h.param_version, m.payload(), h.loss, h.compute_s, seen, h.step_seq);
    }
  }
  m_pending[wi] = {true, h.param_version};
  m_recvs.post(w);
  // In async modes every gradient is its own update; in sync modes the
  // messages behind the N-th are judged against the new version.
  apply_due();
}

bool Shard::done_training() const {
  // train.epochs counts accepted examples (a timeout update may carry fewer
  // than N gradients, so the count of updates alone would end it early).
  return m_st.plan->target_examples > 0 ? m_examples >= m_st.plan->target_examples
                                        : m_core.version() >= m_st.plan->total_steps;
}

bool Shard::apply_due() {
  bool applied = false;
  while (!m_finished && m_core.ready(m_st.clock->now())) {
    apply_one();
    applied = true;
  }
  return applied;
}

void Shard::apply_one() {
  const int used = m_core.pending();
  const double epoch = static_cast<double>(m_examples) / m_st.plan->train_count;
  const auto lr = static_cast<float>(optim::learning_rate(m_sched, epoch));
  metrics::StepRecord rec = m_core.apply(m_mean.data(), m_st.clock->now());
  if (!std::isfinite(rec.loss)) {
    throw Error(ExitCode::kInternal,
                "training diverged: the mean loss of update " + std::to_string(rec.step) +
                    " at shard " + std::to_string(m_self) + " is " + std::to_string(rec.loss) +
                    " (lr " + std::to_string(lr) +
                    "); lower optim.lr (asynchronous modes need a smaller one than sync: "
                    "each update is one worker's batch, and stale)");
  }
  m_opt.step(m_theta.data(), m_mean.data(), lr);
  if (m_use_ema) m_ema.update(m_theta.data());
  m_examples += static_cast<std::uint64_t>(used) * static_cast<std::uint64_t>(m_cfg.train.batch);
  rec.shard = m_self;
  rec.lr = lr;
  rec.t_apply = m_st.clock->now();
  m_core.set_step_start(rec.t_apply);
  m_current.reset();  // parameters changed: the next answer publishes anew
  m_st.steps_log->write(rec);
  m_finished = done_training();
  if (m_finished && m_has_eval) notify_evaluator();
  if (m_st.on_update) m_st.on_update(m_core.version(), m_examples, rec.loss);
  if (m_st.inline_eval && !m_finished) {
    m_st.inline_eval(m_core.version(), m_examples, m_theta.data(),
                     m_use_ema ? m_ema.data() : m_theta.data());
  }
}

// The current version as a message, published once and sent to any number
// of workers; a buffer is reused once no send from it is in flight.
const comm::SharedMessage& Shard::publish() {
  if (m_current) return m_current;
  m_data_sends.progress();
  auto free = std::find_if(m_snapshots.begin(), m_snapshots.end(),
                           [](const comm::SharedMessage& m) { return m.use_count() == 1; });
  if (free == m_snapshots.end()) {
    m_snapshots.push_back(std::make_shared<Message>(m_count));
    free = m_snapshots.end() - 1;
  }
  Message& msg = **free;
  msg.header() = comm::make_header(Kind::kParams, m_self, m_self, m_core.version());
  msg.header().count = static_cast<std::uint32_t>(m_count);
  std::copy(m_theta.begin(), m_theta.end(), msg.payload());
  m_current = *free;
  return m_current;
}

bool Shard::answer_pulls() {
  bool answered = false;
  for (int w = 0; w < m_workers; ++w) {
    Pending& p = m_pending[static_cast<std::size_t>(w)];
    if (!p.waiting || !(m_finished || m_core.may_answer(w, p.version))) continue;
    if (m_finished) {
      if (!m_stop) {
        m_stop = comm::make_message(0, comm::make_header(Kind::kStop, m_self, m_self,
                                                         m_core.version()));
      }
      m_data_sends.send(m_stop, m_roles.worker_rank(w), comm::kTagToWorker);
    } else {
      m_data_sends.send(publish(), m_roles.worker_rank(w), comm::kTagToWorker);
    }
    p.waiting = false;
    answered = true;
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
  std::copy(m_theta.begin(), m_theta.end(), msg->payload());
  const float* avg = m_use_ema ? m_ema.data() : m_theta.data();
  std::copy(avg, avg + m_count, msg->payload() + m_count);
  m_ctrl_sends.send(std::move(msg), m_roles.evaluator_rank, comm::kTagToEvaluator);
  m_eval_waiting = false;
  return true;
}

// Wakes the evaluator from its wait: training has ended.
void Shard::notify_evaluator() {
  m_ctrl_sends.send(
      comm::make_message(0, comm::make_header(Kind::kStop, m_self, m_self, m_core.version())),
      m_roles.evaluator_rank, comm::kTagEvalNotice);
  m_eval_notified = true;
}

// Every answer must complete before the buffers go away.
void Shard::drain() {
  m_data_sends.drain();
  m_ctrl_sends.drain();
}

void Shard::protocol_error(const std::string& what) const {
  throw InternalError("parameter-server shard " + std::to_string(m_self) + " rejected a " + what +
                      " (nothing was applied; check that every rank runs the same syncopt "
                      "binary and config)");
}

}  // namespace syncopt::ps
