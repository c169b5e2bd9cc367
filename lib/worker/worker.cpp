// The worker loop (see worker.hpp and docs/design.md §3, §4, §10).
#include "worker/worker.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/parts.hpp"
#include "comm/protocol.hpp"
#include "common/signals.hpp"
#include "worker/compute_model.hpp"

namespace syncopt::worker {

namespace {

using Clock = std::chrono::steady_clock;
using comm::Kind;
using comm::Message;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

Worker::Worker(const WorkerSetup& st)
    : m_st(st),
      m_shards(st.roles->shards),
      m_rank(st.roles->worker_rank(st.worker)),
      m_batch(static_cast<int>(st.cfg->train.batch)),
      m_loader(*st.train, m_batch, st.cfg->run.seed, st.worker, st.roles->workers,
               st.cfg->data.augment,
               {st.cfg->data.augment_max_rotate_deg, st.cfg->data.augment_max_zoom}),
      m_params(st.param_count),
      m_grad(st.param_count),
      m_version(static_cast<std::size_t>(m_shards), 0),
      m_stopped(static_cast<std::size_t>(m_shards), 0),
      m_sends(st.data_comm),
      m_virtual(st.cfg->train.clock == config::Clock::kVirtual) {
  std::vector<int> shards;
  for (int s = 0; s < m_shards; ++s) {
    const auto count = st.slices[static_cast<std::size_t>(s)].count;
    m_replies.add(s, comm::kTagToWorker, st.data_comm, count);
    for (auto& box : m_outbox) box.push_back(std::make_shared<Message>(count));
    shards.push_back(s);
  }
  if (st.watch != nullptr) {
    m_watch = st.watch;
  } else {
    m_own_watch = std::make_unique<comm::Watch>(st.live_comm, m_rank, shards, shards,
                                                st.cfg->cluster.dead_after_s, st.clock->now());
    m_watch = m_own_watch.get();
  }
  if (st.resume != nullptr) {
    m_step = st.resume->get<std::uint64_t>("step");
    m_loader.restore(st.resume->child("loader"));
  }
}

WorkerResult Worker::run() {
  pull_any();
  while (receive_params()) {
    compute();
    push_gradient();
  }
  say_goodbye();
  m_result.gradients = m_step;
  return m_result;
}

void Worker::send_small(Kind kind, int shard, std::uint64_t seq) {
  auto h = comm::make_header(kind, m_rank, shard, kind == Kind::kPull ? comm::kAnyVersion : 0);
  h.step_seq = seq;
  m_sends.send(comm::make_message(0, h), shard, comm::kTagToShard);
}

// The first pull: any version will do.
void Worker::pull_any() {
  for (int s = 0; s < m_shards; ++s) m_replies.post(s);
  for (int s = 0; s < m_shards; ++s) send_small(Kind::kPull, s, 0);
}

// One answer from every shard: new parameters or STOP. Returns false when
// every shard has said STOP. A shard silent past cluster.dead_after_s ends
// this worker (exit 69).
bool Worker::receive_params() {
  const auto t_wait = Clock::now();
  int outstanding = m_shards;
  m_vstart_s = 0.0;
  std::optional<std::uint64_t> checkpoint_step;
  while (outstanding > 0) {
    const auto done = m_replies.test();
    const double now = m_st.clock->now();
    for (const int dead : m_watch->poll(now)) {
      m_sends.cancel_to(dead);  // what it will never take (kept, not waited for)
      throw UnavailableError("worker " + std::to_string(m_st.worker) + ": shard " +
                             std::to_string(dead) + " (" + comm::describe_rank(*m_st.peers, dead) +
                             ") has been silent for " +
                             std::to_string(static_cast<int>(now - m_watch->last_heard(dead))) +
                             "s: the run cannot go on without it");
    }
    for (const auto& n : m_watch->notices()) {
      if (n.kind != Kind::kEnding) continue;
      throw EndedByPeerError(
          static_cast<ExitCode>(n.code),
          "ends with exit " + std::to_string(n.code) + ": shard " + std::to_string(n.from) + " (" +
              comm::describe_rank(*m_st.peers, n.from) + ") ended the run; see its message");
    }
    if (const int sig = stop_signal(); sig != 0 && !m_stop_requested) {
      m_stop_requested = true;  // shard 0 decides the step; this worker only tells it
      send_small(Kind::kStopRequest, 0, static_cast<std::uint64_t>(sig));
    }
    if (done.empty()) {
      m_sends.progress();
      m_backoff.idle(m_watch->time_to_next_deadline(now));
      continue;
    }
    m_backoff.busy();
    for (const auto& d : done) {
      const int s = d.slot;
      const auto& m = m_replies.message(s);
      const auto& slice = m_st.slices[static_cast<std::size_t>(s)];
      m_watch->heard(s, now);
      const std::string err = comm::check_header(m.header(), {static_cast<std::uint32_t>(s),
                                                              {Kind::kParams, Kind::kStop},
                                                              static_cast<std::uint32_t>(s),
                                                              slice.count,
                                                              d.bytes});
      if (!err.empty()) {
        throw InternalError("worker " + std::to_string(m_st.worker) + " (rank " +
                            std::to_string(m_rank) + ") rejected a " + err);
      }
      const auto& h = m.header();
      if ((h.flags & comm::kFlagCheckpoint) != 0) checkpoint_step = h.step_seq;
      if (static_cast<Kind>(h.kind) == Kind::kStop) {
        m_stopped[static_cast<std::size_t>(s)] = 1;
        if (s == 0) m_result.code = static_cast<ExitCode>(h.code);
        if ((h.flags & comm::kFlagPeerLost) != 0) m_result.peer_lost = true;
      } else {
        std::copy_n(m.payload(), slice.count,
                    m_params.begin() + static_cast<std::ptrdiff_t>(slice.offset));
        m_version[static_cast<std::size_t>(s)] = h.param_version;
        m_vstart_s = std::max(m_vstart_s, h.vtime_s);
      }
      --outstanding;
    }
  }
  m_result.wait_s += since(t_wait);
  if (checkpoint_step && checkpoint_step != m_saved) save_part(*checkpoint_step);
  const bool more = !std::all_of(m_stopped.begin(), m_stopped.end(), [](char c) { return c != 0; });
  if (more) snapshot();
  return more;
}

// Where this worker is before computing on the parameters just received,
// kept until the next ones: a checkpoint of the version they hold is a
// cut before this compute.
void Worker::snapshot() {
  m_snap = checkpoint::State();
  m_snap.put("step", m_step);
  m_snap.put_child("loader", m_loader.state());
  m_snap_version = m_version[0];
}

// This worker's part of checkpoint `step` (shard 0's version). If the
// parameters of that version already came (unflagged, before the checkpoint
// was decided) and were computed on, the gradient was not applied, so the
// part is the state from before that compute; else it is the state now.
void Worker::save_part(std::uint64_t step) {
  checkpoint::State now;
  now.put("step", m_step);
  now.put_child("loader", m_loader.state());
  const checkpoint::State& s = m_snap_version == step && m_snap.size() > 0 ? m_snap : now;
  if (checkpoint::latest_step(m_st.run_dir) != step) {
    checkpoint::write_part(m_st.run_dir, step, checkpoint::worker_part(m_st.worker), s);
  }
  m_saved = step;
  send_small(Kind::kSaved, 0, step);
}

void Worker::compute() {
  m_loader.next();
  const auto t_compute = Clock::now();
  m_loss = m_st.net->train_step(m_params.data(), m_loader.images(), m_loader.labels(), m_batch,
                                m_grad.data());
  m_compute_s = since(t_compute);
  m_result.compute_s += m_compute_s;
  if (m_virtual) {
    // Modelled, not measured, and not slept: the finish time decides. The
    // computation starts when this worker was answered: when its version
    // started, or, for a late gradient's answer, when that gradient was
    // done (a straggler stays busy; docs/design.md §10).
    m_compute_s = modelled_compute_s(m_st.cfg->sim, m_st.worker, m_step);
    m_vtime_s = std::max(m_vtime_s, m_vstart_s) + m_compute_s +
                m_st.stragglers->delay_s(m_st.worker, m_step, m_compute_s);
    return;
  }
  const double delay = m_st.stragglers->delay_s(m_st.worker, m_step, m_compute_s);
  if (delay > 0.0) {
    comm::sleep_s(delay);
    m_result.delay_s += delay;
  }
}

// Sends the gradient's slices (each also asks for newer parameters) after
// posting the receives for the answers.
void Worker::push_gradient() {
  auto& box = m_outbox[m_step % 2];
  // The buffers of two steps ago must be free before they are rewritten.
  while (std::any_of(box.begin(), box.end(),
                     [](const comm::SharedMessage& m) { return m.use_count() > 1; })) {
    m_sends.progress();
    m_backoff.idle();
  }
  m_backoff.busy();
  for (int s = 0; s < m_shards; ++s) m_replies.post(s);
  for (int s = 0; s < m_shards; ++s) {
    const auto& slice = m_st.slices[static_cast<std::size_t>(s)];
    auto& m = *box[static_cast<std::size_t>(s)];
    auto& h = m.header();
    h = comm::make_header(Kind::kGrad, m_rank, s, m_version[static_cast<std::size_t>(s)]);
    h.step_seq = m_step;
    h.count = static_cast<std::uint32_t>(slice.count);
    h.loss = m_loss;
    h.compute_s = m_compute_s;  // pure compute, without injected delay
    h.vtime_s = m_vtime_s;
    h.examples = *std::min_element(m_version.begin(), m_version.end());
    std::copy_n(m_grad.begin() + static_cast<std::ptrdiff_t>(slice.offset), slice.count,
                m.payload());
    m_sends.send(box[static_cast<std::size_t>(s)], s, comm::kTagToShard);
  }
  ++m_step;
}

// Tells every shard this worker is done, then drains every send (bounded:
// a shard that died meanwhile never takes them).
void Worker::say_goodbye() {
  for (int s = 0; s < m_shards; ++s) send_small(Kind::kCtrl, s, 0);
  if (!m_sends.drain(m_st.cfg->cluster.dead_after_s)) {
    spdlog::warn("worker {}: messages to the shards not taken within {}s", m_st.worker,
                 m_st.cfg->cluster.dead_after_s);
  }
  m_watch->stop_beating();
}

}  // namespace syncopt::worker
