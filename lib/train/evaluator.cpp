// The evaluator rank's loop (see evaluator.hpp).
#include "train/evaluator.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <memory>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/parts.hpp"
#include "comm/liveness.hpp"
#include "comm/poll.hpp"
#include "comm/protocol.hpp"
#include "comm/requests.hpp"
#include "comm/shard_watch.hpp"
#include "common/error.hpp"
#include "common/signals.hpp"

namespace syncopt::train {

namespace {

using comm::Kind;

class Evaluator {
 public:
  explicit Evaluator(const EvaluatorSetup& st);
  EvaluatorResult run();

 private:
  void wait_for_interval();
  bool pull();  // θ and θ̄ from every shard; false once training has ended
  void say_goodbye();
  // Takes what has arrived: end notices, checkpoint commands; also checks
  // liveness and stop signals. Returns the parameter slots that completed.
  std::vector<comm::RecvSlots::Done> poll();
  void on_command(const comm::MsgHeader& h);
  void send_to_shard0(Kind kind, std::uint64_t seq);

  const EvaluatorSetup& m_st;
  const int m_shards;
  const int m_self;
  // Slot s: parameters of shard s; S + s: its end notice; 2S: shard 0's commands.
  comm::RecvSlots m_recvs;
  comm::SendQueue m_sends;
  std::unique_ptr<comm::Watch> m_own_watch;
  comm::Watch* m_watch = nullptr;
  comm::IdleBackoff m_backoff;
  std::vector<float> m_theta, m_ema;
  std::uint64_t m_want;  // the version to evaluate next
  std::uint64_t m_version = 0, m_examples = 0;
  double m_next_time;
  int m_notices = 0;          // shards that said training ended
  bool m_final_seen = false;  // shard 0's last checkpoint command
  bool m_stop_requested = false;
  ExitCode m_code = ExitCode::kOk;
  bool m_peer_lost = false;
  EvalTimer m_timer;
};

Evaluator::Evaluator(const EvaluatorSetup& st)
    : m_st(st),
      m_shards(st.roles->shards),
      m_self(st.roles->evaluator_rank),
      m_sends(st.ctrl_comm),
      m_theta(st.param_count),
      m_ema(st.param_count),
      m_next_time(st.cfg->eval.every_s),
      m_timer(st.cfg->eval) {
  const auto& e = st.cfg->eval;
  m_want = e.every_steps > 0 ? static_cast<std::uint64_t>(e.every_steps)
           : e.every_s > 0.0 ? 0
                             : st.plan->total_steps;
  std::vector<int> shards;
  for (int s = 0; s < m_shards; ++s) {
    m_recvs.add(s, comm::kTagToEvaluator, st.ctrl_comm,
                2 * st.slices[static_cast<std::size_t>(s)].count);
    shards.push_back(s);
  }
  // Every shard sends one notice when its training ends; a posted receive
  // for it lets a long eval.every_s wait end at once.
  for (int s = 0; s < m_shards; ++s) m_recvs.add(s, comm::kTagEvalNotice, st.ctrl_comm, 0);
  m_recvs.add(0, comm::kTagCommand, st.ctrl_comm, 0);
  if (st.watch != nullptr) {
    m_watch = st.watch;
  } else {
    m_own_watch = std::make_unique<comm::Watch>(st.live_comm, m_self, shards, shards,
                                                st.cfg->cluster.dead_after_s, st.clock->now());
    m_watch = m_own_watch.get();
  }
  if (st.resume != nullptr) m_next_time = st.resume->get<double>("next_eval_s");
}

EvaluatorResult Evaluator::run() {
  for (int s = 0; s < m_shards; ++s) m_recvs.post(m_shards + s);
  m_recvs.post(2 * m_shards);
  for (;;) {
    wait_for_interval();
    if (!pull()) break;  // the final evaluation happens in the end phase
    const EvalPoint p = m_st.eval->run(m_version, m_examples, m_theta.data(), m_ema.data());
    spdlog::info("{}", m_st.eval->describe(p));
    if (m_st.cfg->eval.every_steps > 0) {
      m_want = m_version + static_cast<std::uint64_t>(m_st.cfg->eval.every_steps);
    }
  }
  say_goodbye();
  return {m_code, m_peer_lost};
}

void Evaluator::send_to_shard0(Kind kind, std::uint64_t seq) {
  auto h = comm::make_header(kind, m_self, 0);
  h.step_seq = seq;
  m_sends.send(comm::make_message(0, h), 0, comm::kTagToShard);
}

std::vector<comm::RecvSlots::Done> Evaluator::poll() {
  const double now = m_st.clock->now();
  comm::check_shards(*m_watch, m_sends, *m_st.peers, "the evaluator", now);
  if (const int sig = stop_signal(); sig != 0 && !m_stop_requested) {
    m_stop_requested = true;
    send_to_shard0(Kind::kStopRequest, static_cast<std::uint64_t>(sig));
  }
  m_sends.progress();
  std::vector<comm::RecvSlots::Done> params;
  for (const auto& d : m_recvs.test()) {
    m_watch->heard(m_recvs.source(d.slot), now);
    if (d.slot < m_shards) {
      params.push_back(d);
    } else if (d.slot < 2 * m_shards) {
      const auto& h = m_recvs.message(d.slot).header();
      if (d.slot == m_shards) m_code = static_cast<ExitCode>(h.code);
      if ((h.flags & comm::kFlagPeerLost) != 0) m_peer_lost = true;
      ++m_notices;
    } else {
      on_command(m_recvs.message(d.slot).header());
      m_recvs.post(d.slot);
    }
  }
  return params;
}

// Shard 0 asks for this rank's part of a checkpoint: where eval.jsonl ends.
void Evaluator::on_command(const comm::MsgHeader& h) {
  const std::string err = comm::check_header(
      h, {0, {Kind::kCheckpoint}, static_cast<std::uint32_t>(0), 0, comm::Message::wire_bytes(0)});
  if (!err.empty()) throw InternalError("evaluator rejected a " + err);
  if ((h.flags & comm::kFlagFinal) != 0) {
    m_final_seen = true;
    m_code = static_cast<ExitCode>(h.code);
  }
  if (h.step_seq == comm::kNoCheckpoint) return;
  if (checkpoint::latest_step(m_st.run_dir) != h.step_seq) {
    m_st.eval_file->flush();
    checkpoint::State s;
    s.put("eval_bytes", m_st.eval_file->bytes());
    s.put("next_eval_s", m_next_time);
    checkpoint::write_part(m_st.run_dir, h.step_seq, checkpoint::kEvaluatorPart, s);
  }
  send_to_shard0(Kind::kSaved, h.step_seq);
}

// eval.every_s: sleep until the next evaluation is due, or training ends.
void Evaluator::wait_for_interval() {
  const auto& e = m_st.cfg->eval;
  if (!(e.every_s > 0.0 && e.every_steps == 0)) return;
  while (m_notices == 0 && m_st.clock->now() < m_next_time) {
    poll();
    comm::sleep_s(std::min(0.05, m_next_time - m_st.clock->now()));
  }
  m_next_time = m_st.clock->now() + e.every_s;
}

bool Evaluator::pull() {
  for (int s = 0; s < m_shards; ++s) {
    m_recvs.post(s);
    m_sends.send(comm::make_message(0, comm::make_header(Kind::kEvalPull, m_self, s, m_want)), s,
                 comm::kTagToShard);
  }
  bool finished = true;
  m_version = std::numeric_limits<std::uint64_t>::max();
  int outstanding = m_shards;
  while (outstanding > 0) {
    const auto done = poll();
    if (done.empty()) m_backoff.idle(0.05);
    for (const auto& d : done) {
      m_backoff.busy();
      const int s = d.slot;
      const auto& m = m_recvs.message(s);
      const auto& sl = m_st.slices[static_cast<std::size_t>(s)];
      const std::string err = comm::check_header(m.header(), {static_cast<std::uint32_t>(s),
                                                              {Kind::kParams},
                                                              static_cast<std::uint32_t>(s),
                                                              2 * sl.count,
                                                              d.bytes});
      if (!err.empty()) throw InternalError("evaluator rejected a " + err);
      std::copy_n(m.payload(), sl.count, m_theta.begin() + static_cast<std::ptrdiff_t>(sl.offset));
      std::copy_n(m.payload() + sl.count, sl.count,
                  m_ema.begin() + static_cast<std::ptrdiff_t>(sl.offset));
      finished = finished && (m.header().flags & comm::kFlagFinal) != 0;
      m_version = std::min<std::uint64_t>(m_version, m.header().param_version);
      if (s == 0) m_examples = m.header().examples;
      --outstanding;
    }
  }
  return !finished;
}

// Waits for every shard's end notice and shard 0's last checkpoint command,
// then tells each shard it may stop serving.
void Evaluator::say_goodbye() {
  while (m_notices < m_shards || !m_final_seen) {
    if (poll().empty()) m_backoff.idle(0.05);
  }
  for (int s = 0; s < m_shards; ++s) {
    m_sends.send(comm::make_message(0, comm::make_header(Kind::kCtrl, m_self, s)), s,
                 comm::kTagToShard);
  }
  if (!m_sends.drain(m_st.cfg->cluster.dead_after_s)) {
    spdlog::warn("evaluator: messages to the shards not taken within {}s",
                 m_st.cfg->cluster.dead_after_s);
  }
  m_watch->stop_beating();
}

}  // namespace

EvaluatorResult run_evaluator(const EvaluatorSetup& setup) {
  Evaluator e(setup);
  return e.run();
}

}  // namespace syncopt::train
