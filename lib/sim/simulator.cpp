// The discrete-event loop of the simulation (see simulator.hpp): thin
// handlers, one per event kind, around ps::ShardCore.
#include "sim/simulator.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "common/error.hpp"
#include "layout/bucket_sequence.hpp"
#include "ps/shard_core.hpp"
#include "sim/events.hpp"

namespace syncopt::sim {

namespace {

using config::Mode;

// What a worker's first pull asks for (comm::kAnyVersion): answered at once.
constexpr std::uint64_t kAnyVersion = std::numeric_limits<std::uint64_t>::max();
constexpr std::uint64_t kNoVersion = std::numeric_limits<std::uint64_t>::max();
constexpr std::uint64_t kShuffleSalt = 0x5348554646ULL;  // shard ids apart from worker ids
constexpr std::uint64_t kPollSalt = 0x504F4C4CULL;
// The share of a training step's compute in the forward pass: the backward
// pass computes two products per layer (the gradients of the input and of
// the weights) for the forward's one.
constexpr double kForwardShare = 1.0 / 3.0;

// A pipelined shard's bucket: layers [first, last) of the model, and the
// share of its slice's bytes applied once it is (forward order).
struct Bucket {
  int first = 0, last = 0;
  std::size_t count = 0;
  double applied = 1.0;
};

struct ShardState {
  ShardState(const SimSetup& st, std::size_t slice_count)
      : core(st.mode, st.workers, st.n, 1, st.timeout_s, st.ssp_bound),
        count(slice_count),
        wanted(static_cast<std::size_t>(st.workers), 0) {}

  ps::ShardCore core;
  std::size_t count;        // floats of the slice: the size of its replies
  bool busy = false;        // inside a pass of its loop (until its kBatchDone)
  bool polling = false;     // a kPoll is scheduled: the idle loop's next test
  double idle_since = 0.0;  // when the last pass ended
  std::uint64_t passes = 0;
  bool finished = false;
  bool recheck = false;               // the pass changed what may be answered
  std::vector<Event> inbox;           // messages that arrived while busy: the next pass's
  std::vector<std::uint64_t> wanted;  // per worker: the version its waiting pull has
  std::vector<int> fresh;             // workers whose pull came in during this pass
  std::vector<int> pending;           // workers whose pull waits from earlier passes
  std::uint64_t examples = 0;
  std::uint64_t deadline_version = kNoVersion;
  // ssp: how many workers hold each clock value (the slowest is first).
  std::map<std::int64_t, int> clocks;
  // Pipelined: the buckets in forward order; the last update of this pass
  // (its replies leave bucket by bucket as it is applied).
  std::vector<Bucket> buckets;
  std::vector<int> reply_order;  // of the buckets (layout::BucketSequence, kParams)
  bool applied_in_pass = false;
  double apply_start = 0.0, apply_end = 0.0;
};

struct WorkerState {
  int outstanding = 0;  // shards yet to answer
  int stopped = 0;      // shards that said STOP
  std::uint64_t seq = 0;
  int group = 1;           // workers shard 0 answered together with this one
  double compute_s = 0.0;  // of the gradient being computed
  // Pipelined: when the first parameters of the next version came in, and
  // when the last bucket of the gradient in flight is sent.
  double first_reply = std::numeric_limits<double>::infinity();
  double busy_until = 0.0;
  // The oldest version of any shard the gradient in flight was computed on
  // (a pipelined worker hears from the top shards before it is done).
  std::uint64_t oldest = 0;
};

class Engine {
 public:
  explicit Engine(const SimSetup& st);
  SimResult run();

 private:
  int shards() const { return static_cast<int>(m_shards.size()); }
  int node_of_worker(int w) const { return shards() + w; }
  void start();
  void dispatch(const Event& e, double now);
  void on_shard_message(const Event& e, double now);
  void on_poll(int s, double now);
  void run_pass(int s, double now);
  void shuffle_pass(int s, std::uint64_t pass);
  void take(ShardState& sh, const Event& e, double seen);
  double apply_due(int s, double t);
  void arm_deadline(int s, double t);
  void end_pass(int s, double now);
  void on_deadline(const Event& e, double now);
  void answer_pulls(int s, double now);
  void reply(int s, int w, int group, double now);
  void on_reply(const Event& e, double now);
  void record_params(int w, int s, int bucket, double at);
  bool post(int from, int to, double ready, double bytes, Event& e, bool deliver = true);
  void push_out();
  void on_worker_sends(const Event& e, double now);
  void send_bucket(const Event& e, double now);
  void start_pipelined(int w, double now, double overhead, double compute, double delay);
  void answer_pipelined(int s, double now);
  void answer_pipelined_fair(int s, double now, bool applying);
  void place_layers();
  void send_decision(const metrics::StepRecord& rec, double now);
  std::uint64_t oldest_version(int w) const;
  layout::BucketSequence& grad_order(int w, int s) {
    return m_grad_order[static_cast<std::size_t>(w) * m_shards.size() +
                        static_cast<std::size_t>(s)];
  }
  bool ssp_push(ShardState& sh, int w);
  bool done_training(const ShardState& sh) const;

  const SimSetup& m_st;
  EventQueue m_queue;
  Network m_net;
  std::vector<ShardState> m_shards;
  std::vector<WorkerState> m_workers;
  std::vector<std::uint64_t> m_versions;  // [worker * S + shard]: the version held
  std::vector<char> m_stopped;            // [worker * S + shard]
  int m_finished_shards = 0;
  double m_end = 0.0;
  std::uint64_t m_gradients = 0;
  std::vector<Event> m_batch;                  // run_pass's messages
  std::vector<int> m_answer, m_still_waiting;  // answer_pulls' lists
  std::vector<Event> m_out;                    // messages whose arrival is known: one run
  // Pipelined exchange: per layer, its shard and bucket; per worker and
  // layer, when its parameters arrived.
  bool m_pipelined = false;
  std::vector<int> m_layer_shard, m_layer_bucket;
  std::vector<double> m_param_at;  // [worker * layers + layer]
  // [worker * S + shard]: the buckets of the gradient in flight a shard has
  // taken, by the rule the real shard checks (layout::BucketSequence).
  std::vector<layout::BucketSequence> m_grad_order;
  // Agreeing shards: shard 0's choices on their way to the followers.
  struct Decision {
    std::vector<int> workers;
    int followers = 0;  // yet to take it
  };
  std::map<std::uint64_t, Decision> m_decisions;
};

Engine::Engine(const SimSetup& st)
    : m_st(st),
      m_net(st.network, static_cast<int>(st.slice_counts.size()) + st.workers, st.host_of),
      m_workers(static_cast<std::size_t>(st.workers)),
      m_versions(static_cast<std::size_t>(st.workers) * st.slice_counts.size(), 0),
      m_stopped(m_versions.size(), 0) {
  if (st.workers < 1 || st.slice_counts.empty()) {
    throw ConfigError(
        "simulation needs at least one worker (sim.workers) and one shard "
        "(cluster.ps)");
  }
  const auto& t = config::traits(st.mode);
  if (!t.uses_ps) {
    throw ConfigError("train.mode = \"" + std::string(config::mode_name(st.mode)) +
                      "\" has no parameter server: syncopt simulate runs sync, async, softsync, "
                      "ssp and timeout");
  }
  if (st.n < 1 || (t.versioned && st.n > st.workers)) {
    throw ConfigError("N = " + std::to_string(st.n) + " gradients per update with " +
                      std::to_string(st.workers) +
                      " workers: need 1 <= N <= sim.workers (lower train.backups)");
  }
  m_shards.reserve(st.slice_counts.size());
  for (const std::size_t count : st.slice_counts) m_shards.emplace_back(st, count);
  place_layers();
  if (st.agree) {
    m_shards[0].core.lead();
    for (std::size_t s = 1; s < m_shards.size(); ++s) m_shards[s].core.follow_leader();
  }
  if (st.mode == Mode::kSsp) {
    for (auto& sh : m_shards) sh.clocks[0] = st.workers;
  }
}

// Which shard holds each layer, and each shard's buckets (pipelined).
void Engine::place_layers() {
  if (m_st.layers.empty()) return;
  const int layers = static_cast<int>(m_st.layers.size());
  m_layer_shard.assign(static_cast<std::size_t>(layers), 0);
  m_layer_bucket.assign(static_cast<std::size_t>(layers), 0);
  int l = 0;
  for (int s = 0; s < shards(); ++s) {
    ShardState& sh = m_shards[static_cast<std::size_t>(s)];
    const int first = l;
    std::size_t held = 0;
    while (held < sh.count && l < layers) held += m_st.layers[static_cast<std::size_t>(l++)].count;
    if (held != sh.count || l == first) {
      throw InternalError("simulation: shard " + std::to_string(s) + "'s slice of " +
                          std::to_string(sh.count) + " floats is not whole layers");
    }
    // Buckets from the top layer down, each of at least bucket_bytes.
    std::vector<Bucket> down;
    Bucket b;
    b.last = l;
    for (int k = l - 1; k >= first; --k) {
      b.count += m_st.layers[static_cast<std::size_t>(k)].count;
      b.first = k;
      if (4.0 * static_cast<double>(b.count) >= m_st.bucket_bytes || k == first) {
        down.push_back(b);
        b = Bucket{};
        b.last = k;
      }
    }
    sh.buckets.assign(down.rbegin(), down.rend());
    std::size_t done = 0;
    for (std::size_t j = 0; j < sh.buckets.size(); ++j) {
      Bucket& bk = sh.buckets[j];
      done += bk.count;
      bk.applied = static_cast<double>(done) / static_cast<double>(sh.count);
      for (int k = bk.first; k < bk.last; ++k) {
        m_layer_shard[static_cast<std::size_t>(k)] = s;
        m_layer_bucket[static_cast<std::size_t>(k)] = static_cast<int>(j);
      }
    }
  }
  if (l != layers) {
    throw InternalError("simulation: the shards' slices do not cover the model's layers");
  }
  for (auto& sh : m_shards) {
    const auto n = static_cast<int>(sh.buckets.size());
    sh.reply_order = layout::BucketSequence(layout::BucketFlow::kParams, n).order();
  }
  for (int w = 0; w < m_st.workers; ++w) {
    for (const auto& sh : m_shards) {
      m_grad_order.emplace_back(layout::BucketFlow::kGradient, static_cast<int>(sh.buckets.size()));
    }
  }
  m_pipelined = m_st.pipeline;
  if (m_pipelined) {
    m_param_at.assign(static_cast<std::size_t>(m_st.workers) * m_st.layers.size(), 0.0);
  }
}

SimResult Engine::run() {
  start();
  std::uint64_t events = 0;
  const auto arrived = [this](const Event& a) { m_queue.push(a); };
  while (m_finished_shards < shards()) {
    // Fair links: the network's next change, if it comes first (its
    // deliveries are events of their own, later than now).
    if (m_net.fair()) {
      const double t = m_net.next_time();
      if (t <= m_queue.next_t() && t < std::numeric_limits<double>::infinity()) {
        m_net.advance(t, arrived);
        continue;
      }
    }
    if (m_queue.empty()) {
      throw InternalError("simulation ran out of events before the last update (" +
                          std::to_string(m_finished_shards) + " of " + std::to_string(shards()) +
                          " shards finished)");
    }
    const Event e = m_queue.pop();
    ++events;
    dispatch(e, e.t);
  }
  SimResult r;
  r.steps = m_shards[0].core.version();
  r.examples = m_shards[0].examples;
  r.end_s = m_end;
  r.events = events;
  r.gradients = m_gradients;
  r.drops = m_shards[0].core.drops();
  return r;
}

// Every worker pulls any version from every shard at t = 0.
void Engine::start() {
  for (auto& sh : m_shards) {
    if (done_training(sh)) {
      sh.finished = true;
      ++m_finished_shards;
    }
  }
  for (int w = 0; w < m_st.workers; ++w) {
    m_workers[static_cast<std::size_t>(w)].outstanding = shards();
    m_out.clear();
    for (int s = 0; s < shards(); ++s) {
      Event e;
      e.kind = EventKind::kPullArrives;
      e.shard = s;
      e.worker = w;
      e.version = kAnyVersion;
      if (post(node_of_worker(w), s, 0.0, kHeaderBytes, e)) m_out.push_back(e);
    }
    push_out();
  }
}

// A message from node `from` to node `to`, ready at `ready`, delivering `e`
// (deliver = false: it only occupies the links). Serial links book it now:
// true, with e.t its arrival, for the caller to push. Fair links take it
// and deliver it when it arrives (false), unless it crosses no link.
bool Engine::post(int from, int to, double ready, double bytes, Event& e, bool deliver) {
  if (!m_net.fair()) {
    e.t = m_net.transfer(from, to, ready, bytes);
    return deliver;
  }
  return m_net.send(from, to, ready, bytes, e, deliver) && deliver;
}

// The messages of m_out, in time order, as one run.
void Engine::push_out() {
  if (m_out.empty()) return;
  Event* run = m_queue.begin_run(m_out.size());
  std::copy(m_out.begin(), m_out.end(), run);
  m_queue.end_run();
}

void Engine::dispatch(const Event& e, double now) {
  switch (e.kind) {
    case EventKind::kPullArrives:
    case EventKind::kGradArrives:
    case EventKind::kDecision:
      on_shard_message(e, now);
      break;
    case EventKind::kBatchDone:
      end_pass(e.shard, now);
      break;
    case EventKind::kPoll:
      on_poll(e.shard, now);
      break;
    case EventKind::kDeadline:
      on_deadline(e, now);
      break;
    case EventKind::kReplyArrives:
      on_reply(e, now);
      break;
    case EventKind::kParamsArrive:
      record_params(e.worker, e.shard, e.bucket, now);
      break;
    case EventKind::kWorkerSends:
      on_worker_sends(e, now);
      break;
  }
}

bool Engine::done_training(const ShardState& sh) const {
  return m_st.target_examples > 0 ? sh.examples >= m_st.target_examples
                                  : sh.core.version() >= m_st.total_steps;
}

// A message waits for the shard loop's next test of its receives: the end
// of the current pass, or, when idle, the end of its back-off sleep.
void Engine::on_shard_message(const Event& e, double now) {
  ShardState& sh = m_shards[static_cast<std::size_t>(e.shard)];
  sh.inbox.push_back(e);
  if (sh.busy || sh.polling) return;
  // An event-driven shard (poll_max_s = 0) takes it at once: no draw.
  const double u =
      m_st.poll_max_s > 0.0
          ? worker::hash_uniform(m_st.timing.seed, kPollSalt + static_cast<std::uint64_t>(e.shard),
                                 sh.passes, 0)
          : 0.0;
  const double next = next_poll(sh.idle_since, now, m_st.poll_max_s, u);
  if (next <= now) {
    run_pass(e.shard, now);
    return;
  }
  Event poll;
  poll.kind = EventKind::kPoll;
  poll.shard = e.shard;
  poll.t = next;
  sh.polling = true;
  m_queue.push(poll);
}

void Engine::on_poll(int s, double now) {
  ShardState& sh = m_shards[static_cast<std::size_t>(s)];
  sh.polling = false;
  if (!sh.busy) run_pass(s, now);
}

// One pass of the real shard loop (ps/shard.cpp's run()): take every message
// that is in, all stamped `now`; after each, apply every update due (each
// keeps the shard busy for its apply time); then, at the end of the pass,
// answer the pulls that may be answered.
void Engine::run_pass(int s, double now) {
  ShardState& sh = m_shards[static_cast<std::size_t>(s)];
  sh.busy = true;
  const std::uint64_t version = sh.core.version();
  m_batch.clear();
  m_batch.swap(sh.inbox);
  shuffle_pass(s, sh.passes++);
  double t = now;
  for (const Event& e : m_batch) {
    take(sh, e, now);
    t = apply_due(s, t);
  }
  t = apply_due(s, t);  // timeout: due with no message at all
  arm_deadline(s, t);
  sh.recheck = sh.recheck || sh.core.version() != version || sh.finished;
  if (t > now) {
    Event done;
    done.kind = EventKind::kBatchDone;
    done.shard = s;
    done.t = t;
    m_queue.push(done);
  } else {
    end_pass(s, now);
  }
}

// Messages taken in one pass arrived in an order the real loop cannot
// tell; it takes them in a seeded random order (so that the first-N cutoff
// does not favour low worker numbers), and so does this one: Fisher-Yates
// from hashed uniforms of (seed, shard, pass).
void Engine::shuffle_pass(int s, std::uint64_t pass) {
  for (std::size_t i = m_batch.size(); i > 1; --i) {
    const double u = worker::hash_uniform(m_st.timing.seed,
                                          kShuffleSalt + static_cast<std::uint64_t>(s), pass, i);
    const auto j = std::min(static_cast<std::size_t>(u * static_cast<double>(i)), i - 1);
    std::swap(m_batch[i - 1], m_batch[j]);
  }
}

// One message into the shard core (a gradient) and the list of pulls.
void Engine::take(ShardState& sh, const Event& e, double seen) {
  const int w = e.worker;
  if (e.kind == EventKind::kDecision) {
    const auto it = m_decisions.find(e.version);
    sh.core.decide(e.version, it->second.workers);
    if (--it->second.followers == 0) m_decisions.erase(it);
    return;
  }
  if (e.kind == EventKind::kGradArrives) {
    sh.core.on_push(w);
    if (m_st.mode == Mode::kSsp) sh.recheck = ssp_push(sh, w) || sh.recheck;
    if (!sh.finished) {
      const float dummy = 0.0f;
      sh.core.on_grad(w, e.version, &dummy, 0.0f, e.compute_s, seen, e.seq, 0.0, e.oldest);
    }
  }
  sh.wanted[static_cast<std::size_t>(w)] = e.version;
  sh.fresh.push_back(w);
}

// Applies every update due at `t`, one after another; returns when the
// shard is done with them.
double Engine::apply_due(int s, double t) {
  ShardState& sh = m_shards[static_cast<std::size_t>(s)];
  while (!sh.finished && sh.core.ready(t)) {
    float mean = 0.0f;
    metrics::StepRecord rec = sh.core.apply(&mean, t);
    sh.applied_in_pass = true;
    sh.apply_start = t;
    t += m_st.timing.apply_s_of(s, rec.version);
    sh.apply_end = t;
    if (m_st.agree && s == 0) send_decision(rec, sh.apply_start);
    rec.shard = s;
    rec.lr = m_st.lr;
    rec.t_apply = t;
    sh.core.set_step_start(t);
    sh.examples += static_cast<std::uint64_t>(rec.used) * static_cast<std::uint64_t>(m_st.batch);
    m_end = std::max(m_end, t);
    if (done_training(sh)) {
      sh.finished = true;
      ++m_finished_shards;
    }
    if (m_st.on_step) m_st.on_step(std::move(rec));
  }
  return t;
}

// timeout: the step's deadline, once its first gradient is in.
void Engine::arm_deadline(int s, double t) {
  ShardState& sh = m_shards[static_cast<std::size_t>(s)];
  const double to_deadline = sh.core.time_to_deadline(t);
  if (sh.finished || to_deadline < 0.0 || sh.deadline_version == sh.core.version()) return;
  Event d;
  d.kind = EventKind::kDeadline;
  d.shard = s;
  d.version = sh.core.version();
  d.t = t + to_deadline;
  sh.deadline_version = d.version;
  m_queue.push(d);
}

void Engine::end_pass(int s, double now) {
  ShardState& sh = m_shards[static_cast<std::size_t>(s)];
  answer_pulls(s, now);
  sh.applied_in_pass = false;
  sh.busy = false;
  sh.idle_since = now;
  if (!sh.inbox.empty() || (!sh.finished && sh.core.ready(now))) run_pass(s, now);
}

void Engine::on_deadline(const Event& e, double now) {
  ShardState& sh = m_shards[static_cast<std::size_t>(e.shard)];
  if (sh.finished || sh.core.version() != e.version) return;  // applied with N already
  if (sh.busy) return;  // the pass in progress applies it when it ends
  if (sh.core.ready(now)) {
    run_pass(e.shard, now);
    return;
  }
  // first + timeout, rounded, may fall an ulp short of the deadline.
  Event again = e;
  again.t = std::nextafter(now, std::numeric_limits<double>::infinity());
  m_queue.push(again);
}

bool Engine::ssp_push(ShardState& sh, int w) {
  const std::int64_t slowest = sh.clocks.begin()->first;
  const std::int64_t c = sh.core.clocks()[static_cast<std::size_t>(w)];  // after on_push
  auto it = sh.clocks.find(c - 1);
  if (--it->second == 0) sh.clocks.erase(it);
  ++sh.clocks[c];
  return sh.clocks.begin()->first != slowest;
}

// The pulls of this pass, and those of earlier passes when the version or
// the slowest clock moved (only then can their answer change), answered in
// worker order as the real loop does: STOP after the last update.
void Engine::answer_pulls(int s, double now) {
  ShardState& sh = m_shards[static_cast<std::size_t>(s)];
  m_answer.clear();
  m_still_waiting.clear();
  const auto consider = [&](int w) {
    const std::uint64_t v = sh.wanted[static_cast<std::size_t>(w)];
    if (sh.finished || v == kAnyVersion || sh.core.may_answer(w, v)) {
      m_answer.push_back(w);
    } else {
      m_still_waiting.push_back(w);
    }
  };
  if (sh.recheck) {
    for (const int w : sh.pending) consider(w);
    sh.pending.clear();
  }
  for (const int w : sh.fresh) consider(w);
  sh.fresh.clear();
  sh.recheck = false;
  sh.pending.insert(sh.pending.end(), m_still_waiting.begin(), m_still_waiting.end());
  std::sort(m_answer.begin(), m_answer.end());
  if (m_pipelined && !sh.finished) {
    answer_pipelined(s, now);
    return;
  }
  // The replies leave together, in worker order (serial links: one after
  // another over the shard's link): one run.
  m_out.clear();
  for (const int w : m_answer) reply(s, w, static_cast<int>(m_answer.size()), now);
  push_out();
}

// Sends worker `w` the shard's parameters (or STOP after the last update).
void Engine::reply(int s, int w, int group, double now) {
  ShardState& sh = m_shards[static_cast<std::size_t>(s)];
  Event e;
  e.group = group;
  e.kind = EventKind::kReplyArrives;
  e.shard = s;
  e.worker = w;
  e.stop = sh.finished;
  e.version = sh.core.version();
  const double bytes = sh.finished ? kHeaderBytes : message_bytes(sh.count);
  if (post(s, node_of_worker(w), now, bytes, e)) m_out.push_back(e);
}

void Engine::on_reply(const Event& e, double now) {
  const auto w = static_cast<std::size_t>(e.worker);
  const std::size_t slot = w * m_shards.size() + static_cast<std::size_t>(e.shard);
  WorkerState& ws = m_workers[w];
  if (e.bucket >= 0) record_params(e.worker, e.shard, e.bucket, now);  // fair links
  if (e.stop) {
    if (!m_stopped[slot]) ++ws.stopped;
    m_stopped[slot] = 1;
  } else {
    m_versions[slot] = e.version;
    if (e.shard == 0) ws.group = e.group;
  }
  if (--ws.outstanding > 0) return;
  if (ws.stopped == shards()) return;  // every shard said STOP: this worker is done
  const double first_reply = ws.first_reply;
  ws.first_reply = std::numeric_limits<double>::infinity();
  // Overhead, compute and the straggler's delay, then the gradient goes out.
  TimingModel::Draw draw;
  draw.worker = e.worker;
  draw.seq = ws.seq;
  draw.round = m_versions[w * m_shards.size()];  // the version read from shard 0
  draw.group = ws.group;
  draw.workers = m_st.workers;
  const double c = m_st.timing.compute_s(draw);
  const double d = m_st.stragglers ? m_st.stragglers->delay_s(e.worker, ws.seq, c) : 0.0;
  ws.compute_s = c;
  ws.oldest = oldest_version(e.worker);
  if (m_pipelined) {
    // The batch is loaded from the first parameters in (not before the
    // last gradient's backward is done), then layer by layer.
    start_pipelined(e.worker, std::max(first_reply, ws.busy_until), m_st.timing.overhead_s_of(draw),
                    c, d);
    return;
  }
  Event send;
  send.kind = EventKind::kWorkerSends;
  send.worker = e.worker;
  send.t = now + m_st.timing.overhead_s_of(draw) + c + d;
  m_queue.push(send);
}

void Engine::on_worker_sends(const Event& e, double now) {
  if (e.bucket >= 0) {
    send_bucket(e, now);
    return;
  }
  const auto w = static_cast<std::size_t>(e.worker);
  WorkerState& ws = m_workers[w];
  ws.outstanding = shards();
  m_out.clear();
  for (int s = 0; s < shards(); ++s) {
    Event g;
    g.kind = EventKind::kGradArrives;
    g.shard = s;
    g.worker = e.worker;
    g.version = m_versions[w * m_shards.size() + static_cast<std::size_t>(s)];
    g.seq = ws.seq;
    g.compute_s = ws.compute_s;
    g.oldest = ws.oldest;
    if (post(node_of_worker(e.worker), s, now,
             message_bytes(m_shards[static_cast<std::size_t>(s)].count), g)) {
      m_out.push_back(g);
    }
  }
  push_out();
  ++ws.seq;
  ++m_gradients;
}

// Pipelined replies: to every worker answered, in worker order (first come
// first served over the shard's link, as whole replies are), its buckets in
// forward order, each as soon as the update has applied it (at once when
// none was applied in this pass); the last bucket is the reply event, the
// others only occupy the links and say when each layer's parameters are in.
void Engine::answer_pipelined(int s, double now) {
  ShardState& sh = m_shards[static_cast<std::size_t>(s)];
  const std::size_t layers = m_st.layers.size();
  const int group = static_cast<int>(m_answer.size());
  const bool applying = sh.applied_in_pass && sh.apply_end == now;
  if (m_net.fair()) {
    answer_pipelined_fair(s, now, applying);
    return;
  }
  Event* run = m_queue.begin_run(m_answer.size());
  for (std::size_t i = 0; i < m_answer.size(); ++i) {
    const int w = m_answer[i];
    WorkerState& ws = m_workers[static_cast<std::size_t>(w)];
    double at = now;
    for (const int j : sh.reply_order) {
      const Bucket& b = sh.buckets[static_cast<std::size_t>(j)];
      const double ready =
          applying ? sh.apply_start + (sh.apply_end - sh.apply_start) * b.applied : now;
      at = m_net.transfer(s, node_of_worker(w), ready, message_bytes(b.count));
      ws.first_reply = std::min(ws.first_reply, at);
      for (int k = b.first; k < b.last; ++k) {
        m_param_at[static_cast<std::size_t>(w) * layers + static_cast<std::size_t>(k)] = at;
      }
    }
    Event& e = run[i];
    e.group = group;
    e.kind = EventKind::kReplyArrives;
    e.shard = s;
    e.worker = w;
    e.version = sh.core.version();
    e.t = at;
  }
  m_queue.end_run();
}

// The same over fair links: every worker's buckets are handed to the
// network at once (each connection sends its buckets in turn, the
// connections share the shard's link); each bucket but the last says when
// its layers' parameters are in (kParamsArrive), the last is the reply.
void Engine::answer_pipelined_fair(int s, double now, bool applying) {
  ShardState& sh = m_shards[static_cast<std::size_t>(s)];
  m_out.clear();
  for (const int w : m_answer) {
    for (std::size_t n = 0; n < sh.reply_order.size(); ++n) {
      const int j = sh.reply_order[n];
      const Bucket& b = sh.buckets[static_cast<std::size_t>(j)];
      const double ready =
          applying ? sh.apply_start + (sh.apply_end - sh.apply_start) * b.applied : now;
      Event e;
      e.group = static_cast<int>(m_answer.size());
      e.kind = n + 1 == sh.reply_order.size() ? EventKind::kReplyArrives : EventKind::kParamsArrive;
      e.shard = s;
      e.worker = w;
      e.bucket = j;
      e.version = sh.core.version();
      if (post(s, node_of_worker(w), ready, message_bytes(b.count), e)) m_out.push_back(e);
    }
  }
  push_out();
}

// Fair links: bucket `bucket` of shard `s`'s parameters reached worker `w`.
void Engine::record_params(int w, int s, int bucket, double at) {
  const std::size_t layers = m_st.layers.size();
  const Bucket& b = m_shards[static_cast<std::size_t>(s)].buckets[static_cast<std::size_t>(bucket)];
  WorkerState& ws = m_workers[static_cast<std::size_t>(w)];
  ws.first_reply = std::min(ws.first_reply, at);
  for (int k = b.first; k < b.last; ++k) {
    m_param_at[static_cast<std::size_t>(w) * layers + static_cast<std::size_t>(k)] = at;
  }
}

// A pipelined gradient's timeline, from `start`: the batch (overhead), each
// layer's forward once its parameters are in, then backward from the top,
// each bucket but a shard's bucket 0 sent when its lowest layer is done; the
// straggler's delay spread over the layers with the compute, by the same
// shares (a slow machine is slow at every layer, as the worker paces it:
// worker::StragglerPacer, docs/design.md §7); then every shard's bucket 0, shard 0 first,
// as the worker does (worker.cpp, grads_ready and push_gradient): a
// shard's bucket 0 asks it for parameters, so that every shard is asked at
// the same time, and the leader's request does not queue behind the
// others' slices. One run of sends.
void Engine::start_pipelined(int w, double start, double overhead, double compute, double delay) {
  const std::size_t layers = m_st.layers.size();
  const double* param_at = &m_param_at[static_cast<std::size_t>(w) * layers];
  const double busy = compute + delay;
  double t = start + overhead;
  for (std::size_t k = 0; k < layers; ++k) {
    t = std::max(t, param_at[k]) + busy * kForwardShare * m_st.layers[k].flops_share;
  }
  std::size_t buckets = 0;
  for (const auto& sh : m_shards) buckets += sh.buckets.size();
  Event* run = m_queue.begin_run(buckets);
  std::size_t n = 0;
  const auto send = [&](int s, int j, double at) {
    Event& e = run[n++];
    e.kind = EventKind::kWorkerSends;
    e.worker = w;
    e.shard = s;
    e.bucket = j;
    e.t = at;
  };
  for (std::size_t k = layers; k-- > 0;) {
    t += busy * (1.0 - kForwardShare) * m_st.layers[k].flops_share;
    const int s = m_layer_shard[k];
    const int j = m_layer_bucket[k];
    if (j == grad_order(w, s).last() ||
        m_shards[static_cast<std::size_t>(s)].buckets[static_cast<std::size_t>(j)].first !=
            static_cast<int>(k)) {
      continue;  // bucket 0 goes last; or the bucket's lowest layer is not done yet
    }
    send(s, j, t);
  }
  for (int s = 0; s < shards(); ++s) send(s, grad_order(w, s).last(), t);
  m_queue.end_run();
  m_workers[static_cast<std::size_t>(w)].busy_until = t;
}

// One bucket of a pipelined gradient leaves; the shard has the gradient
// when its last (lowest) bucket is in. The top bucket opens the round.
void Engine::send_bucket(const Event& e, double now) {
  const auto w = static_cast<std::size_t>(e.worker);
  WorkerState& ws = m_workers[w];
  const int s = e.shard;
  const ShardState& sh = m_shards[static_cast<std::size_t>(s)];
  const Bucket& b = sh.buckets[static_cast<std::size_t>(e.bucket)];
  layout::BucketSequence& order = grad_order(e.worker, s);
  if (!order.take(e.bucket)) {
    throw InternalError("simulation: worker " + std::to_string(e.worker) +
                        " sent gradient bucket " + std::to_string(e.bucket) + " to shard " +
                        std::to_string(s) + " where bucket " + std::to_string(order.next()) +
                        " is due (" + order.rule() + ")");
  }
  if (s == shards() - 1 && order.taken() == 1) {
    ws.outstanding = shards();  // the first bucket: every shard will answer
  }
  const bool complete = order.complete();
  Event g;
  g.kind = EventKind::kGradArrives;
  g.shard = s;
  g.worker = e.worker;
  g.version = m_versions[w * m_shards.size() + static_cast<std::size_t>(s)];
  g.seq = ws.seq;
  g.compute_s = ws.compute_s;
  g.oldest = ws.oldest;
  if (post(node_of_worker(e.worker), s, now, message_bytes(b.count), g, complete)) {
    m_queue.push(g);
  }
  if (!complete) return;
  if (s == 0) {  // the gradient's last bucket
    ++ws.seq;
    ++m_gradients;
  }
}

// The oldest version worker `w` holds of any shard (a GRAD says so, for the
// leader of agreeing shards).
std::uint64_t Engine::oldest_version(int w) const {
  const auto* v = &m_versions[static_cast<std::size_t>(w) * m_shards.size()];
  return *std::min_element(v, v + m_shards.size());
}

// Shard 0 tells every other shard which workers update `rec.version`
// averaged: one small message each, as ps/shard.cpp's send_decision.
void Engine::send_decision(const metrics::StepRecord& rec, double now) {
  Decision d;
  for (const auto& g : rec.grads) {
    if (g.accepted && g.version == rec.version) d.workers.push_back(g.worker);
  }
  d.followers = shards() - 1;
  const double bytes = message_bytes(d.workers.size());
  m_decisions[rec.version] = std::move(d);
  for (int s = 1; s < shards(); ++s) {
    Event e;
    e.kind = EventKind::kDecision;
    e.shard = s;
    e.worker = 0;
    e.version = rec.version;
    if (post(0, s, now, bytes, e)) m_queue.push(e);
  }
}

}  // namespace

SimResult simulate(const SimSetup& setup) {
  Engine engine(setup);
  return engine.run();
}

}  // namespace syncopt::sim
