// The worker loop (see worker.hpp and docs/design.md §3, §4, §10).
#include "worker/worker.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <optional>
#include <thread>
#include <utility>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/parts.hpp"
#include "comm/protocol.hpp"
#include "comm/shard_watch.hpp"
#include "common/bf16.hpp"
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

// Waiting for a bucket inside a step is on the step's critical path: sleep
// at most this long between polls there.
constexpr double kStepPollS = 50e-6;
// The share of a training step's compute in the forward pass (backward
// computes two products per layer for the forward's one; sim/simulator.cpp
// spreads compute the same way).
constexpr double kForwardShare = 1.0 / 3.0;

}  // namespace

class Worker::Hooks final : public nn::StepHooks {
 public:
  Hooks(Worker& w, std::size_t count) : StepHooks(count), m_w(w) {}
  void need_params(std::size_t offset, std::size_t count) override {
    m_w.need_params(offset, count);
  }
  void grads_ready(std::size_t offset, float loss) override { m_w.grads_ready(offset, loss); }

 private:
  Worker& m_w;
};

Worker::Worker(const WorkerSetup& st)
    : m_st(st),
      m_shards(st.roles->shards),
      m_rank(st.roles->worker_rank(st.worker)),
      m_batch(static_cast<int>(st.cfg->train.batch)),
      m_loader(*st.train, m_batch, st.cfg->run.seed, st.worker, st.roles->workers,
               st.cfg->data.augment,
               {st.cfg->data.augment_max_rotate_deg, st.cfg->data.augment_max_zoom}),
      m_params(std::make_shared<std::vector<float>>(st.param_count)),
      m_grad(std::make_shared<std::vector<float>>(st.param_count)),
      m_version(static_cast<std::size_t>(m_shards), 0),
      m_stopped(static_cast<std::size_t>(m_shards), 0),
      m_sends(st.data_comm),
      m_virtual(st.cfg->train.clock == config::Clock::kVirtual) {
  std::vector<int> shards;
  for (int s = 0; s < m_shards; ++s) {
    const auto si = static_cast<std::size_t>(s);
    const std::vector<layout::Slice> own{st.slices[si]};
    const auto& cut = si < st.buckets.size() && !st.buckets[si].empty() ? st.buckets[si] : own;
    m_first.push_back(m_buckets.size());
    m_param_order.emplace_back(layout::BucketFlow::kParams, static_cast<int>(cut.size()));
    m_grad_order.emplace_back(layout::BucketFlow::kGradient, static_cast<int>(cut.size()));
    for (std::size_t i = 0; i < cut.size(); ++i) {
      m_buckets.push_back({s, static_cast<int>(i), cut[i].offset, cut[i].count, 0});
    }
    // Parameters are received in place (post_bucket); the slot's own
    // buffer holds the header.
    m_replies.add(s, comm::kTagToWorker, st.data_comm, 0);
    shards.push_back(s);
  }
  for (std::size_t g = 0; g < m_buckets.size(); ++g)
    m_outbox.push_back(std::make_shared<Message>(0));
  m_wire_bf16 = st.cfg->exchange.wire == config::Precision::kBf16;
  if (m_wire_bf16) {
    std::vector<std::size_t> largest(static_cast<std::size_t>(m_shards), 0);
    for (const Bucket& b : m_buckets) {
      auto& l = largest[static_cast<std::size_t>(b.shard)];
      l = std::max(l, b.count);
      m_wire_out.push_back(std::make_shared<std::vector<std::uint16_t>>(b.count));
    }
    for (const std::size_t l : largest) {
      m_wire_in.push_back(std::make_shared<std::vector<std::uint16_t>>(l));
    }
  }
  m_sent.assign(m_buckets.size(), 0);
  const std::vector<double>& shares = st.group_shares;
  m_share_before.assign(shares.size(), 0.0);
  m_share_after.assign(shares.size(), 0.0);
  double below = 0.0, above = 0.0;
  for (std::size_t i = 0; i < shares.size(); ++i) {
    m_share_before[i] = kForwardShare * below;
    below += shares[i];
  }
  for (std::size_t i = shares.size(); i-- > 0;) {
    above += shares[i];
    m_share_after[i] = kForwardShare + (1.0 - kForwardShare) * above;
  }
  m_vstart.assign(static_cast<std::size_t>(m_shards), 0.0);
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

// The receive of shard s's next message: a bucket's header (this answer's
// first when none came yet), whose payload then comes straight into its
// place in the parameters (take()).
void Worker::post_bucket(int s) { m_replies.post(s); }

// The first pull: any version will do.
void Worker::pull_any() {
  for (int s = 0; s < m_shards; ++s) post_bucket(s);
  for (int s = 0; s < m_shards; ++s) send_small(Kind::kPull, s, 0);
}

// While waiting for a shard: a shard silent past cluster.dead_after_s ends
// this worker (exit 69); a stop signal here is told to shard 0, which
// decides the step to stop at.
void Worker::watch(double now) {
  comm::check_shards(*m_watch, m_sends, *m_st.peers, "worker " + std::to_string(m_st.worker), now);
  if (const int sig = stop_signal(); sig != 0 && !m_stop_requested) {
    m_stop_requested = true;  // shard 0 decides the step; this worker only tells it
    send_small(Kind::kStopRequest, 0, static_cast<std::uint64_t>(sig));
  }
}

// One message from shard s: its next bucket of parameters (a shard sends
// them in forward order), or STOP as the first message of an answer.
void Worker::take(int s, int bytes) {
  const auto si = static_cast<std::size_t>(s);
  const auto& m = m_replies.message(s);
  const std::size_t first = m_first[si];
  const std::size_t end = end_of(si);
  const auto& h = m.header();
  if (m_replies.raw(s)) {
    // The payload of the bucket whose header came last, now in place.
    if (bytes != static_cast<int>(comm::payload_bytes(h))) {
      throw InternalError("worker " + std::to_string(m_st.worker) + " (rank " +
                          std::to_string(m_rank) + "): parameter bucket " +
                          std::to_string(h.bucket) + " from shard " + std::to_string(s) + " has " +
                          std::to_string(bytes) + " bytes, its header says " +
                          std::to_string(comm::payload_bytes(h)));
    }
    if (m_wire_bf16) {
      const Bucket& b = m_buckets[first + h.bucket];
      bf16::decode(m_wire_in[si]->data(), b.count, m_params->data() + b.offset);
    }
    m_buckets[first + h.bucket].version = h.param_version;
    if (h.bucket == 0) m_version[si] = h.param_version;
    if (!m_param_order[si].take(h.bucket)) {
      throw InternalError("worker " + std::to_string(m_st.worker) +
                          ": a parameter payload out of order (internal error)");
    }
    if (!m_param_order[si].complete()) post_bucket(s);
    return;
  }
  std::vector<comm::BucketSpan> spans;
  for (std::size_t g = first; g < end; ++g) {
    spans.push_back({m_buckets[g].offset, m_buckets[g].count});
  }
  // STOP comes first, or after some buckets of an update that diverged
  // halfway through its slice.
  std::string err = comm::check_header(h, {static_cast<std::uint32_t>(s),
                                           {Kind::kParams, Kind::kStop},
                                           static_cast<std::uint32_t>(s),
                                           m_st.slices[si].count,
                                           bytes,
                                           &spans,
                                           m_wire_bf16});
  if (err.empty() && static_cast<Kind>(h.kind) == Kind::kParams) {
    if ((h.flags & comm::kFlagSplit) == 0) {
      err = "PARAMS from shard " + std::to_string(s) + " with its payload inline, not apart";
    } else if (h.bucket != m_param_order[si].next()) {
      err = "parameter bucket " + std::to_string(h.bucket) + " from shard " + std::to_string(s) +
            ", expected bucket " + std::to_string(m_param_order[si].next()) + " (" +
            m_param_order[si].rule() + ")";
    }
  }
  if (!err.empty()) {
    throw InternalError("worker " + std::to_string(m_st.worker) + " (rank " +
                        std::to_string(m_rank) + ") rejected a " + err);
  }
  // (Kept until the step starts: an answer may begin to arrive while the
  // gradient is still going out.)
  if ((h.flags & comm::kFlagCheckpoint) != 0) m_checkpoint_step = h.step_seq;
  if (static_cast<Kind>(h.kind) == Kind::kStop) {
    m_stopped[si] = 1;
    if (s == 0) m_result.code = static_cast<ExitCode>(h.code);
    if ((h.flags & comm::kFlagPeerLost) != 0) m_result.peer_lost = true;
    // Nothing more comes this step: what is missing stays as it was.
    m_param_order[si].end();
    return;
  }
  // The header is valid: its floats go straight into the parameters.
  m_vstart[si] = std::max(m_vstart[si], h.vtime_s);
  const Bucket& b = m_buckets[first + h.bucket];
  if (m_wire_bf16) {
    m_replies.post_payload(s, m_wire_in[si], m_wire_in[si]->data(), b.count, 2);
  } else {
    m_replies.post_payload(s, m_params, m_params->data() + b.offset, b.count);
  }
}

// The first message of every shard's answer: new parameters or STOP.
// Returns false when every shard has said STOP.
bool Worker::receive_params() {
  const auto t_wait = Clock::now();
  m_phase = StepPhases{};  // the next gradient's step begins with this wait
  // (m_param_order was reset when each answer's receive was posted; an
  // answer may have begun to arrive while the gradient went out.)
  std::fill(m_sent.begin(), m_sent.end(), 0);
  receive_until([&] {
    return std::none_of(m_param_order.begin(), m_param_order.end(),
                        [](const layout::BucketSequence& q) { return q.taken() == 0; });
  });
  m_result.wait_s += since(t_wait);
  m_phase.wait += since(t_wait);
  const auto checkpoint_step = std::exchange(m_checkpoint_step, std::nullopt);
  if (checkpoint_step && checkpoint_step != m_saved) save_part(*checkpoint_step);
  const bool more = !std::all_of(m_stopped.begin(), m_stopped.end(), [](char c) { return c != 0; });
  if (more) snapshot();
  return more;
}

// Until bucket g (of m_buckets) of this step's parameters is in m_params.
void Worker::await_bucket(std::size_t g) {
  const Bucket& b = m_buckets[g];
  const auto si = static_cast<std::size_t>(b.shard);
  if (m_param_order[si].has(b.index)) return;
  const auto t_wait = Clock::now();
  receive_until([&] { return m_param_order[si].has(b.index); });
  m_result.wait_s += since(t_wait);
  m_phase.wait += since(t_wait);
}

// Takes the shards' messages until `enough()`, watching them meanwhile.
void Worker::receive_until(const std::function<bool()>& enough) {
  while (!enough()) {
    const auto done = m_replies.test();
    const double now = m_st.clock->now();
    watch(now);
    if (done.empty()) {
      m_sends.progress();
      idle(now);
      continue;
    }
    m_backoff.busy();
    for (const auto& d : done) {
      m_watch->heard(d.slot, now);
      take(d.slot, d.bytes);
    }
  }
}

// Before a layer's forward: its parameters, params[offset, offset + count).
void Worker::need_params(std::size_t offset, std::size_t count) {
  // A straggler's slowness of the layers below, before it asks for more.
  if (m_pacer.active() && !m_share_before.empty()) pace(m_share_before[group_of(offset)]);
  // The first bucket that ends after `offset`, then every one that starts
  // before the range ends.
  auto it = std::upper_bound(m_buckets.begin(), m_buckets.end(), offset,
                             [](std::size_t o, const Bucket& b) { return o < b.offset + b.count; });
  for (; it != m_buckets.end() && it->offset < offset + count; ++it) {
    await_bucket(static_cast<std::size_t>(it - m_buckets.begin()));
  }
  m_sends.progress();
}

// Backward has finished grad[offset, end): every bucket inside it goes now,
// top first, except each shard's bucket 0, which push_gradient() sends.
void Worker::grads_ready(std::size_t offset, float loss) {
  m_loss = loss;
  if (!m_phase.split && m_st.pipeline) {
    m_phase.split = true;
    m_phase.forward = since(m_compute_start) - (m_result.wait_s - m_wait_at_start);
  }
  // A straggler's slowness of the backward so far, before the buckets go.
  if (m_pacer.active() && !m_share_after.empty()) pace(m_share_after[group_of(offset)]);
  for (std::size_t g = m_buckets.size(); g-- > 0;) {
    const Bucket& b = m_buckets[g];
    if (b.offset < offset) break;
    if (!m_sent[g] && b.index != m_grad_order[static_cast<std::size_t>(b.shard)].last()) {
      send_bucket(g);
    }
  }
  m_sends.progress();
}

void Worker::send_bucket(std::size_t g) {
  const Bucket& b = m_buckets[g];
  const auto si = static_cast<std::size_t>(b.shard);
  auto& slot = m_outbox[g];
  if (slot.use_count() > 1) throw InternalError("worker: a gradient header still in flight");
  if (!m_grad_order[si].take(b.index)) {
    throw InternalError("worker: gradient bucket " + std::to_string(b.index) + " to shard " +
                        std::to_string(b.shard) + " where bucket " +
                        std::to_string(m_grad_order[si].next()) + " is due (" +
                        m_grad_order[si].rule() + ")");
  }
  const bool completes = m_grad_order[si].complete();
  const std::size_t end = end_of(si);
  Message& m = *slot;
  auto& h = m.header();
  h = comm::make_header(Kind::kGrad, m_rank, b.shard, b.version);
  h.step_seq = m_step;
  h.count = static_cast<std::uint32_t>(b.count);
  h.offset = static_cast<std::uint32_t>(b.offset);
  h.bucket = static_cast<std::uint16_t>(b.index);
  h.buckets = static_cast<std::uint16_t>(end - m_first[si]);
  h.loss = m_loss;
  // Pure compute, without injected delay: all of it for bucket 0, which
  // goes last; so far for the others (virtual clock: the modelled time).
  h.compute_s = completes || m_virtual ? m_compute_s
                                       : since(m_compute_start) - m_pacer.slept_s() -
                                             (m_result.wait_s - m_wait_at_start);
  h.vtime_s = m_vtime_s;
  h.examples = *std::min_element(m_version.begin(), m_version.end());
  // The step's phases so far (all of them in the bucket that completes it).
  h.phase_flags = comm::kPhasesMeasured | (m_phase.split ? comm::kPhasesSplit : 0u);
  h.data_s = static_cast<float>(m_phase.data);
  h.forward_s = static_cast<float>(m_phase.forward);
  h.backward_s = static_cast<float>(m_phase.backward);
  h.wait_s = static_cast<float>(m_phase.wait);
  h.send_s = static_cast<float>(m_phase.send + (completes ? since(m_push_start) : 0.0));
  h.flags = comm::kFlagSplit;
  if (completes) {
    // This completes the gradient at the shard and asks for parameters:
    // the receive for the answer is posted first (every bucket of this
    // step's parameters is in: the forward needed them all).
    await_bucket(m_first[si] + static_cast<std::size_t>(m_param_order[si].last()));
    m_param_order[si].reset();
    m_vstart[si] = 0.0;
    post_bucket(b.shard);
  }
  if (m_wire_bf16) {
    // Rounded to nearest even; the previous step's send from here is done
    // (the next backward waits for every send of the last gradient).
    auto& wire = m_wire_out[g];
    if (wire.use_count() > 1) throw InternalError("worker: a bf16 gradient still in flight");
    bf16::encode(m_grad->data() + b.offset, b.count, wire->data());
    h.flags |= comm::kFlagBf16;
    m_sends.send_split(slot, wire, wire->data(), b.shard, comm::kTagToShard);
  } else {
    m_sends.send_split(slot, m_grad, m_grad->data() + b.offset, b.shard, comm::kTagToShard);
  }
  m_sent[g] = 1;
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
  load_batch();
  if (m_virtual) {
    // Modelled, not measured, and not slept: the finish time decides. Known
    // before the compute, so every bucket carries it. The computation starts
    // when this worker was answered: when its version started, or, for a
    // late gradient's answer, when that gradient was done (a straggler
    // stays busy; docs/design.md §10).
    m_compute_s = modelled_compute_s(m_st.cfg->sim, m_st.worker, m_step);
    const double start = std::max(m_vtime_s, *std::max_element(m_vstart.begin(), m_vstart.end()));
    m_vtime_s = start + m_compute_s + m_st.stragglers->delay_s(m_st.worker, m_step, m_compute_s);
  }
  const auto t_sends = Clock::now();
  await_sends();
  m_phase.send += since(t_sends);
  // Wall clock: a straggler's slowdown, slept as it computes (pace()),
  // unless it is slow at its data (load_batch()).
  const bool slow_compute =
      !m_virtual && m_st.cfg->stragglers.phase != config::StragglerPhase::kData;
  m_pacer.start(slow_compute ? m_st.stragglers->slowdown(m_st.worker, m_step) : Slowdown{});
  m_wait_at_start = m_result.wait_s;
  m_compute_start = Clock::now();
  if (m_st.pipeline) {
    Hooks hooks(*this, m_params->size());
    m_loss = m_st.net->train_step_staged(m_params->data(), m_loader.images(), m_loader.labels(),
                                         m_batch, m_grad->data(), hooks);
  } else {
    m_loss = m_st.net->train_step(m_params->data(), m_loader.images(), m_loader.labels(), m_batch,
                                  m_grad->data());
  }
  if (m_pacer.active()) pace(1.0);
  // Phases: forward until backward reported its first gradient, backward
  // after (a pipelined step), each without its waits for parameters.
  const double waited = m_result.wait_s - m_wait_at_start;
  if (m_phase.split) {
    m_phase.backward = since(m_compute_start) - m_phase.forward - waited;
  } else {
    m_phase.forward = since(m_compute_start) - waited;
  }
  // Pure compute: without the straggler's sleeps and without the waits for
  // parameters inside a pipelined step (the simulator, fitted to it, models
  // those waits itself and slows only the compute by a straggler's factor,
  // as the worker does).
  const double measured = since(m_compute_start) - m_pacer.slept_s() - waited;
  m_result.compute_s += measured;
  if (!m_virtual) m_compute_s = measured;
}

// The next batch; a straggler slow at its data (stragglers.phase = data)
// sleeps its slowdown of the loading here (wall clock only).
void Worker::load_batch() {
  const auto t0 = Clock::now();
  m_loader.next();
  if (!m_virtual && m_st.cfg->stragglers.phase == config::StragglerPhase::kData) {
    const double d = m_st.stragglers->slowdown(m_st.worker, m_step).late_s(since(t0), 1.0);
    if (d > 0.0) {
      comm::sleep_s(d);
      m_result.delay_s += d;
    }
  }
  m_phase.data = since(t0);
}

// The parameter group holding flat offset `offset` (m_st.group_offsets).
std::size_t Worker::group_of(std::size_t offset) const {
  const auto& o = m_st.group_offsets;
  const auto it = std::upper_bound(o.begin(), o.end(), offset);
  return it == o.begin() ? 0 : static_cast<std::size_t>(it - o.begin()) - 1;
}

// A straggler has done share `phi` of its step's work: it sleeps what its
// slowdown says it is late by now (worker::StragglerPacer), measured on its
// own compute (without its waits for parameters and earlier sleeps).
void Worker::pace(double phi) {
  const double work =
      since(m_compute_start) - m_pacer.slept_s() - (m_result.wait_s - m_wait_at_start);
  const double d = m_pacer.due_s(std::max(0.0, work), phi);
  if (d <= 0.0) return;
  comm::sleep_s(d);
  m_result.delay_s += d;
}

// Nothing came: a step waits on this, so look again soon (spin when this
// rank has a core of its own).
void Worker::idle(double now) {
  if (m_st.own_core) {
    std::this_thread::yield();
  } else {
    m_backoff.idle(std::min(kStepPollS, m_watch->time_to_next_deadline(now)));
  }
}

// The gradient is sent from where backward writes it: before the next
// backward, every send of the last one must have completed (they have been
// received already: every shard answered after the whole gradient came).
void Worker::await_sends() {
  while (m_sends.in_flight() > 0) {
    m_sends.progress();
    if (m_sends.in_flight() == 0) break;
    const double now = m_st.clock->now();
    watch(now);
    idle(now);
  }
  m_backoff.busy();
}

// Sends what the step has not sent yet: without the pipeline every shard's
// slice, with it each shard's bucket 0, which completes the gradient there
// and asks for newer parameters. Shard 0 first: with agreeing shards it
// decides every update, and the others wait for its decision, so its
// request should not queue behind the larger slices of the others (within
// a shard, buckets still go top first).
void Worker::push_gradient() {
  m_push_start = Clock::now();
  for (std::size_t si = 0; si < m_first.size(); ++si) {
    for (const int j : m_grad_order[si].order()) {
      const std::size_t g = m_first[si] + static_cast<std::size_t>(j);
      if (!m_sent[g]) send_bucket(g);
    }
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
