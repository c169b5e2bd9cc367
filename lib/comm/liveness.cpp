// Liveness decisions, pause detection and the heartbeat thread (see liveness.hpp).
#include "comm/liveness.hpp"

#include <spdlog/spdlog.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "comm/flight.hpp"
#include "comm/mpi.hpp"
#include "comm/protocol.hpp"
#include "comm/requests.hpp"
#include "common/error.hpp"

namespace syncopt::comm {

namespace {

double clock_s(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// Receives of notices are tested at most this often: they are rare, and a
// shard polls its watch on every turn of its loop.
constexpr double kTestEveryS = 0.001;

}  // namespace

double monotonic_s() { return clock_s(CLOCK_MONOTONIC); }
double boottime_s() { return clock_s(CLOCK_BOOTTIME); }

LivenessCore::LivenessCore(int peers, double dead_after_s, double now)
    : m_dead_after_s(dead_after_s),
      m_last(static_cast<std::size_t>(peers), now),
      m_dead(static_cast<std::size_t>(peers), 0),
      m_retired(static_cast<std::size_t>(peers), 0) {}

void LivenessCore::heard(int peer, double now) {
  auto& last = m_last[static_cast<std::size_t>(peer)];
  last = std::max(last, now);
}

void LivenessCore::heartbeat(int peer, double now, std::uint32_t flags) {
  heard(peer, now);
  if ((flags & kFlagPaused) == 0) return;
  restart(now);
  ++m_peer_pauses;
}

std::vector<int> LivenessCore::newly_dead(double now) {
  std::vector<int> out;
  for (std::size_t p = 0; p < m_last.size(); ++p) {
    if (m_dead[p] || m_retired[p] || now - m_last[p] < m_dead_after_s) continue;
    m_dead[p] = 1;
    out.push_back(static_cast<int>(p));
  }
  return out;
}

void LivenessCore::retire(int peer) { m_retired[static_cast<std::size_t>(peer)] = 1; }

void LivenessCore::restart(double now) {
  for (std::size_t p = 0; p < m_last.size(); ++p) {
    if (!m_dead[p]) m_last[p] = std::max(m_last[p], now);
  }
}

int LivenessCore::dead_count() const {
  return static_cast<int>(std::count(m_dead.begin(), m_dead.end(), 1));
}

double LivenessCore::time_to_next_deadline(double now) const {
  double best = m_dead_after_s;
  for (std::size_t p = 0; p < m_last.size(); ++p) {
    if (m_dead[p] || m_retired[p]) continue;
    best = std::min(best, m_last[p] + m_dead_after_s - now);
  }
  return std::max(0.0, best);
}

double PauseDetector::tick(double mono, double boot) {
  double pause = 0.0;
  if (m_started) {
    const double mono_gap = mono - m_mono;
    // The boot clock also counts a suspended machine, the monotonic one not.
    const double suspended = (boot - m_boot) - mono_gap;
    if (mono_gap > m_threshold_s) pause = mono_gap;
    if (suspended > m_threshold_s) pause = std::max(pause, suspended);
  }
  m_started = true;
  m_mono = mono;
  m_boot = boot;
  return pause;
}

double heartbeat_interval_s(double dead_after_s) {
  return std::clamp(dead_after_s / 8.0, 0.02, 1.0);
}

double pause_threshold_s(double dead_after_s) {
  return std::max(4.0 * heartbeat_interval_s(dead_after_s), dead_after_s / 2.0);
}

Heartbeat::Heartbeat(MPI_Comm comm, std::vector<int> to, double interval_s,
                     double pause_threshold_s, int self)
    : m_comm(comm),
      m_to(std::move(to)),
      m_interval_s(interval_s),
      m_self(self),
      m_detector(pause_threshold_s),
      m_last_round_s(monotonic_s()) {
  m_thread = std::thread([this] { run(); });
}

Heartbeat::~Heartbeat() { stop(); }

void Heartbeat::drop(int rank) {
  std::lock_guard<std::mutex> lock(m_mutex);
  m_dropped.push_back(rank);
}

void Heartbeat::stop() {
  {
    std::lock_guard<std::mutex> lock(m_mutex);
    if (m_stop && !m_thread.joinable()) return;
    m_stop = true;
  }
  m_beating = false;
  m_wake.notify_all();
  if (m_thread.joinable()) m_thread.join();
}

// The thread: one small message to each peer per interval. A beat to a peer
// whose previous beat has not been received yet is skipped, so a stopped
// peer never accumulates more than one buffer from us. Each round first
// looks at the clocks: a gap means this process was not running.
void Heartbeat::run() {
  try {
    SendQueue sends(m_comm, false);  // another thread: never in the flight recorder
    std::vector<SharedMessage> last(m_to.size());
    std::vector<char> tell_paused(m_to.size(), 0);
    std::unique_lock<std::mutex> lock(m_mutex);
    std::uint64_t beat = 0;
    while (!m_stop) {
      const auto dropped = m_dropped;
      lock.unlock();
      const double mono = monotonic_s();
      if (const double pause = m_detector.tick(mono, boottime_s()); pause > 0.0) {
        std::fill(tell_paused.begin(), tell_paused.end(), 1);
        m_pauses.fetch_add(1);
        spdlog::warn(
            "this rank was not running for {:.1f}s (stopped, suspended, or starved of CPU): a "
            "pause, not a death; silence timers restarted here and at its peers",
            pause);
      }
      m_last_round_s.store(mono);
      sends.progress();
      for (std::size_t i = 0; i < m_to.size(); ++i) {
        const int to = m_to[i];
        if (std::find(dropped.begin(), dropped.end(), to) != dropped.end()) {
          if (last[i]) sends.cancel_to(to);
          last[i].reset();
          continue;
        }
        if (last[i] && last[i].use_count() > 1) continue;  // previous beat still in flight
        auto h = make_header(Kind::kHeartbeat, m_self, 0, beat);
        if (tell_paused[i] != 0) h.flags |= kFlagPaused;
        tell_paused[i] = 0;
        last[i] = make_message(0, h);
        sends.send(last[i], to, kTagHeartbeat);
      }
      ++beat;
      lock.lock();
      m_wake.wait_for(lock, std::chrono::duration<double>(m_interval_s), [this] { return m_stop; });
    }
    lock.unlock();
    for (std::size_t i = 0; i < m_to.size(); ++i) {
      if (last[i] && last[i].use_count() > 1) sends.cancel_to(m_to[i]);
    }
  } catch (const std::exception& e) {
    // Without beats this rank will be declared dead by its watchers, which
    // is the truth as far as they can tell; say why here.
    m_beating = false;
    spdlog::error("heartbeat thread stopped: {}", e.what());
  }
}

Watch::Watch(MPI_Comm comm, int self, std::vector<int> beat_to, std::vector<int> peers,
             double dead_after_s, double now)
    : m_self(self),
      m_peers(std::move(peers)),
      m_beat_to(std::move(beat_to)),
      m_core(static_cast<int>(m_peers.size()), dead_after_s, now),
      m_pause_threshold_s(pause_threshold_s(dead_after_s)),
      m_sends(comm, false),
      m_beat(comm, m_beat_to, heartbeat_interval_s(dead_after_s), m_pause_threshold_s, self) {
  int size = 1;
  SYNCOPT_CHECK_MPI(MPI_Comm_size(comm, &size));
  m_notice_capacity = static_cast<std::size_t>(size);
  for (const int p : m_peers) m_slots.add(p, kTagHeartbeat, comm, 0);
  for (const int p : m_peers) m_slots.add(p, kTagNotice, comm, m_notice_capacity);
  for (int i = 0; i < m_slots.size(); ++i) m_slots.post(i);
}

Watch::~Watch() { m_beat.stop(); }

int Watch::index_of(int rank) const {
  const auto it = std::find(m_peers.begin(), m_peers.end(), rank);
  return it == m_peers.end() ? -1 : static_cast<int>(it - m_peers.begin());
}

std::vector<int> Watch::poll(double now) {
  // This process was not running: its heartbeat thread has not had a round
  // for longer than a pause (it just woke, before that thread did), or it
  // has seen the gap since. (A peer that says so restarts them too:
  // LivenessCore::heartbeat.)
  bool restart = m_beat.beating() && monotonic_s() - m_beat.last_round_s() > m_pause_threshold_s;
  if (const int p = m_beat.pauses(); p != m_seen_pauses) {
    m_seen_pauses = p;
    restart = true;
  }
  const int n = static_cast<int>(m_peers.size());
  if (restart || now - m_last_test_s >= kTestEveryS || now < m_last_test_s) {
    m_last_test_s = now;
    for (const auto& d : m_slots.test()) {
      const int i = d.slot % n;
      const MsgHeader& h = m_slots.message(d.slot).header();
      if (d.slot < n) {
        m_core.heartbeat(i, now, h.flags);
      } else {
        m_core.heard(i, now);
        const std::string err =
            check_header(h, {static_cast<std::uint32_t>(m_peers[static_cast<std::size_t>(i)]),
                             {Kind::kEnding, Kind::kSaved, Kind::kStop, Kind::kWritten},
                             0,
                             m_notice_capacity,
                             d.bytes});
        if (!err.empty()) throw InternalError("liveness: rejected a " + err);
        Notice notice;
        notice.from = m_peers[static_cast<std::size_t>(i)];
        notice.kind = static_cast<Kind>(h.kind);
        notice.code = h.code;
        notice.step = h.step_seq;
        const float* p = m_slots.message(d.slot).payload();
        for (std::uint32_t k = 0; k < h.count; ++k) notice.ranks.push_back(static_cast<int>(p[k]));
        if (notice.kind == Kind::kEnding) {
          // The run ends: what this rank was doing is worth keeping.
          (void)flight::dump("rank " + std::to_string(notice.from) + " ends the run with exit " +
                             std::to_string(notice.code));
        }
        m_notices.push_back(std::move(notice));
      }
      m_slots.post(d.slot);
    }
  }
  if (restart) {
    m_core.restart(now);
    ++m_restarts;
  }
  std::vector<int> dead;
  const auto newly = m_core.newly_dead(now);
  if (!newly.empty()) {
    // A deadline fired: before anything is cancelled, what this rank waited for.
    std::string who;
    for (const int i : newly) {
      const int rank = m_peers[static_cast<std::size_t>(i)];
      who += (who.empty() ? "rank " : ", rank ") + std::to_string(rank);
    }
    (void)flight::dump(fmt::format("{} silent for {:.1f} s (cluster.dead_after_s)", who,
                                   now - m_core.last_heard(newly.front())));
  }
  flight::poll_signal();
  for (const int i : newly) {
    const int rank = m_peers[static_cast<std::size_t>(i)];
    m_slots.cancel(i);
    m_slots.cancel(n + i);
    m_beat.drop(rank);
    m_sends.cancel_to(rank);
    dead.push_back(rank);
  }
  m_sends.progress();
  return dead;
}

std::vector<Notice> Watch::notices() { return std::exchange(m_notices, {}); }

void Watch::notify(int rank, Kind kind, std::uint32_t code, std::uint64_t step,
                   const std::vector<int>& ranks) {
  auto h = make_header(kind, m_self, 0);
  h.code = code;
  h.step_seq = step;
  const std::size_t count = std::min(ranks.size(), m_notice_capacity);
  h.count = static_cast<std::uint32_t>(count);
  auto msg = make_message(count, h);
  for (std::size_t k = 0; k < count; ++k) msg->payload()[k] = static_cast<float>(ranks[k]);
  m_sends.send(std::move(msg), rank, kTagNotice);
}

bool Watch::flush(double limit_s) { return m_sends.drain(limit_s); }

void Watch::heard(int rank, double now) {
  if (const int i = index_of(rank); i >= 0) m_core.heard(i, now);
}

void Watch::retire(int rank) {
  if (const int i = index_of(rank); i >= 0) m_core.retire(i);
}

bool Watch::alive(int rank) const {
  const int i = index_of(rank);
  return i < 0 || m_core.alive(i);
}

double Watch::last_heard(int rank) const {
  const int i = index_of(rank);
  return i < 0 ? 0.0 : m_core.last_heard(i);
}

void Watch::restart_timers(double now) { m_core.restart(now); }

void Watch::stop_beating() { m_beat.stop(); }

}  // namespace syncopt::comm
