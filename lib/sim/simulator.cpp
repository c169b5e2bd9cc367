// The discrete-event loop of the simulation (see simulator.hpp): thin
// handlers, one per event kind, around ps::ShardCore.
#include "sim/simulator.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <string>

#include "common/error.hpp"
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
};

struct WorkerState {
  int outstanding = 0;  // shards yet to answer
  int stopped = 0;      // shards that said STOP
  std::uint64_t seq = 0;
  int group = 1;           // workers shard 0 answered together with this one
  double compute_s = 0.0;  // of the gradient being computed
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
  Event reply(int s, int w, int group, double now);
  void on_reply(const Event& e, double now);
  void on_worker_sends(const Event& e, double now);
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
};

Engine::Engine(const SimSetup& st)
    : m_st(st),
      m_net(st.network, static_cast<int>(st.slice_counts.size()) + st.workers),
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
  if (st.mode == Mode::kSsp) {
    for (auto& sh : m_shards) sh.clocks[0] = st.workers;
  }
}

SimResult Engine::run() {
  start();
  std::uint64_t events = 0;
  while (m_finished_shards < shards()) {
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
    Event* run = m_queue.begin_run(static_cast<std::size_t>(shards()));
    for (int s = 0; s < shards(); ++s) {
      Event& e = run[s];
      e.kind = EventKind::kPullArrives;
      e.shard = s;
      e.worker = w;
      e.version = kAnyVersion;
      e.t = m_net.transfer(node_of_worker(w), s, 0.0, kHeaderBytes);
    }
    m_queue.end_run();
  }
}

void Engine::dispatch(const Event& e, double now) {
  switch (e.kind) {
    case EventKind::kPullArrives:
    case EventKind::kGradArrives:
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
  const double u = worker::hash_uniform(
      m_st.timing.seed, kPollSalt + static_cast<std::uint64_t>(e.shard), sh.passes, 0);
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
  if (e.kind == EventKind::kGradArrives) {
    sh.core.on_push(w);
    if (m_st.mode == Mode::kSsp) sh.recheck = ssp_push(sh, w) || sh.recheck;
    if (!sh.finished) {
      const float dummy = 0.0f;
      sh.core.on_grad(w, e.version, &dummy, 0.0f, e.compute_s, seen, e.seq);
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
    t += m_st.timing.apply_s_of(s, rec.version);
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
  // The replies leave one after another over the shard's link: one run.
  Event* run = m_queue.begin_run(m_answer.size());
  for (std::size_t i = 0; i < m_answer.size(); ++i) {
    run[i] = reply(s, m_answer[i], static_cast<int>(m_answer.size()), now);
  }
  m_queue.end_run();
}

// Sends worker `w` the shard's parameters (or STOP after the last update).
Event Engine::reply(int s, int w, int group, double now) {
  ShardState& sh = m_shards[static_cast<std::size_t>(s)];
  Event e;
  e.group = group;
  e.kind = EventKind::kReplyArrives;
  e.shard = s;
  e.worker = w;
  e.stop = sh.finished;
  e.version = sh.core.version();
  const double bytes = sh.finished ? kHeaderBytes : message_bytes(sh.count);
  e.t = m_net.transfer(s, node_of_worker(w), now, bytes);
  return e;
}

void Engine::on_reply(const Event& e, double now) {
  const auto w = static_cast<std::size_t>(e.worker);
  const std::size_t slot = w * m_shards.size() + static_cast<std::size_t>(e.shard);
  WorkerState& ws = m_workers[w];
  if (e.stop) {
    if (!m_stopped[slot]) ++ws.stopped;
    m_stopped[slot] = 1;
  } else {
    m_versions[slot] = e.version;
    if (e.shard == 0) ws.group = e.group;
  }
  if (--ws.outstanding > 0) return;
  if (ws.stopped == shards()) return;  // every shard said STOP: this worker is done
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
  Event send;
  send.kind = EventKind::kWorkerSends;
  send.worker = e.worker;
  send.t = now + m_st.timing.overhead_s_of(draw) + c + d;
  m_queue.push(send);
}

void Engine::on_worker_sends(const Event& e, double now) {
  const auto w = static_cast<std::size_t>(e.worker);
  WorkerState& ws = m_workers[w];
  ws.outstanding = shards();
  Event* run = m_queue.begin_run(static_cast<std::size_t>(shards()));
  for (int s = 0; s < shards(); ++s) {
    Event& g = run[s];
    g.kind = EventKind::kGradArrives;
    g.shard = s;
    g.worker = e.worker;
    g.version = m_versions[w * m_shards.size() + static_cast<std::size_t>(s)];
    g.seq = ws.seq;
    g.compute_s = ws.compute_s;
    g.t = m_net.transfer(node_of_worker(e.worker), s, now,
                         message_bytes(m_shards[static_cast<std::size_t>(s)].count));
  }
  m_queue.end_run();
  ++ws.seq;
  ++m_gradients;
}

}  // namespace

SimResult simulate(const SimSetup& setup) {
  Engine engine(setup);
  return engine.run();
}

}  // namespace syncopt::sim
