// The evaluator rank's loop (see evaluator.hpp).
#include "train/evaluator.hpp"

#include <algorithm>
#include <limits>

#include <spdlog/spdlog.h>

#include "comm/poll.hpp"
#include "comm/protocol.hpp"
#include "comm/requests.hpp"
#include "common/error.hpp"

namespace syncopt::train {

namespace {

using comm::Kind;

class Evaluator {
 public:
  explicit Evaluator(const EvaluatorSetup& st);
  void run();

 private:
  void wait_for_interval();
  bool pull();  // θ and θ̄ from every shard; false once training has ended
  void say_goodbye();

  const EvaluatorSetup& m_st;
  const int m_shards;
  const int m_self;
  comm::RecvSlots m_recvs;  // slot s: parameters of shard s; slot S + s: its end notice
  comm::SendQueue m_sends;
  comm::IdleBackoff m_backoff;
  std::vector<float> m_theta, m_ema;
  std::uint64_t m_want;  // the version to evaluate next
  std::uint64_t m_version = 0, m_examples = 0;
  double m_next_time;
  bool m_ended = false;  // a shard has said training ended
};

Evaluator::Evaluator(const EvaluatorSetup& st)
    : m_st(st), m_shards(st.roles->shards), m_self(st.roles->evaluator_rank),
      m_sends(st.ctrl_comm), m_theta(st.param_count), m_ema(st.param_count),
      m_next_time(st.cfg->eval.every_s) {
  const auto& e = st.cfg->eval;
  m_want = e.every_steps > 0 ? static_cast<std::uint64_t>(e.every_steps)
           : e.every_s > 0.0 ? 0
                             : st.plan->total_steps;
  for (int s = 0; s < m_shards; ++s) {
    m_recvs.add(s, comm::kTagToEvaluator, st.ctrl_comm, 2 * st.slices[static_cast<std::size_t>(s)].count);
  }
  // Every shard sends one notice when its training ends; a posted receive
  // for it lets a long eval.every_s wait end at once.
  for (int s = 0; s < m_shards; ++s) m_recvs.add(s, comm::kTagEvalNotice, st.ctrl_comm, 0);
}

void Evaluator::run() {
  for (int s = 0; s < m_shards; ++s) m_recvs.post(m_shards + s);
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
}

// eval.every_s: sleep until the next evaluation is due, or training ends.
void Evaluator::wait_for_interval() {
  const auto& e = m_st.cfg->eval;
  if (!(e.every_s > 0.0 && e.every_steps == 0)) return;
  while (!m_ended && m_st.clock->now() < m_next_time) {
    for (const auto& d : m_recvs.test()) m_ended = m_ended || d.slot >= m_shards;
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
    for (const auto& d : m_recvs.wait(m_backoff)) {
      if (d.slot >= m_shards) {  // an end notice
        m_ended = true;
        continue;
      }
      const int s = d.slot;
      const auto& m = m_recvs.message(s);
      const auto& sl = m_st.slices[static_cast<std::size_t>(s)];
      const std::string err = comm::check_header(
          m.header(), {static_cast<std::uint32_t>(s), {Kind::kParams},
                       static_cast<std::uint32_t>(s), 2 * sl.count, d.bytes});
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
  m_sends.drain();
  return !finished;
}

// Waits for every shard's end notice, then tells each it may stop serving.
void Evaluator::say_goodbye() {
  while (m_recvs.any_active()) m_recvs.wait(m_backoff);
  for (int s = 0; s < m_shards; ++s) {
    m_sends.send(comm::make_message(0, comm::make_header(Kind::kCtrl, m_self, s)), s,
                 comm::kTagToShard);
  }
  m_sends.drain();
}

}  // namespace

void run_evaluator(const EvaluatorSetup& setup) {
  Evaluator e(setup);
  e.run();
}

}  // namespace syncopt::train
