// Liveness decisions and the heartbeat thread (see liveness.hpp).
#include "comm/liveness.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>

#include "comm/protocol.hpp"
#include "comm/requests.hpp"

namespace syncopt::comm {

LivenessCore::LivenessCore(int peers, double dead_after_s, double now)
    : m_dead_after_s(dead_after_s),
      m_last(static_cast<std::size_t>(peers), now),
      m_dead(static_cast<std::size_t>(peers), 0),
      m_retired(static_cast<std::size_t>(peers), 0) {}

void LivenessCore::heard(int peer, double now) {
  auto& last = m_last[static_cast<std::size_t>(peer)];
  last = std::max(last, now);
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

double heartbeat_interval_s(double dead_after_s) {
  return std::clamp(dead_after_s / 8.0, 0.02, 1.0);
}

Heartbeat::Heartbeat(MPI_Comm comm, std::vector<int> to, double interval_s, int self)
    : m_comm(comm), m_to(std::move(to)), m_interval_s(interval_s), m_self(self) {
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
  m_wake.notify_all();
  if (m_thread.joinable()) m_thread.join();
}

// The thread: one small message to each peer per interval. A beat to a peer
// whose previous beat has not been received yet is skipped, so a stopped
// peer never accumulates more than one buffer from us.
void Heartbeat::run() {
  try {
    SendQueue sends(m_comm);
    std::vector<SharedMessage> last(m_to.size());
    std::unique_lock<std::mutex> lock(m_mutex);
    std::uint64_t beat = 0;
    while (!m_stop) {
      const auto dropped = m_dropped;
      lock.unlock();
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
    spdlog::error("heartbeat thread stopped: {}", e.what());
  }
}

Watch::Watch(MPI_Comm comm, int self, std::vector<int> beat_to, std::vector<int> peers,
             double dead_after_s, double now)
    : m_peers(std::move(peers)),
      m_core(static_cast<int>(m_peers.size()), dead_after_s, now),
      m_beat(comm, std::move(beat_to), heartbeat_interval_s(dead_after_s), self) {
  for (const int p : m_peers) m_slots.add(p, kTagHeartbeat, comm, 0);
  for (int i = 0; i < m_slots.size(); ++i) m_slots.post(i);
}

Watch::~Watch() { m_beat.stop(); }

int Watch::index_of(int rank) const {
  const auto it = std::find(m_peers.begin(), m_peers.end(), rank);
  return it == m_peers.end() ? -1 : static_cast<int>(it - m_peers.begin());
}

std::vector<int> Watch::poll(double now) {
  for (const auto& d : m_slots.test()) {
    m_core.heard(d.slot, now);
    m_slots.post(d.slot);
  }
  std::vector<int> dead;
  for (const int i : m_core.newly_dead(now)) {
    const int rank = m_peers[static_cast<std::size_t>(i)];
    m_slots.cancel(i);
    m_beat.drop(rank);
    dead.push_back(rank);
  }
  return dead;
}

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

void Watch::stop_beating() { m_beat.stop(); }

}  // namespace syncopt::comm
