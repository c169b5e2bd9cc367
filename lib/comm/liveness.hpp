// Telling a silent peer from a slow one (docs/design.md §10). Every worker, the
// evaluator and every shard run a Heartbeat: a thread that sends a small
// message to the ranks that watch it at a fixed interval, whatever the
// main thread is doing (a long compute step does not stop it; a stopped or
// killed process does). The watchers feed what they hear into a
// LivenessCore, which decides, free of MPI, who has been silent for
// cluster.dead_after_s and is dead.
#pragma once

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/requests.hpp"

namespace syncopt::comm {

// The decision: peers 0..n-1, each alive until silent for dead_after_s.
class LivenessCore {
 public:
  LivenessCore(int peers, double dead_after_s, double now);
  // Anything from `peer` (a heartbeat or any other message) at `now`.
  void heard(int peer, double now);
  // Peers silent for dead_after_s at `now`, each returned once, ever.
  std::vector<int> newly_dead(double now);
  // `peer` said goodbye: it is expected to fall silent, and is not dead.
  void retire(int peer);
  bool alive(int peer) const { return !m_dead[static_cast<std::size_t>(peer)]; }
  bool retired(int peer) const { return m_retired[static_cast<std::size_t>(peer)] != 0; }
  double last_heard(int peer) const { return m_last[static_cast<std::size_t>(peer)]; }
  int dead_count() const;
  // Seconds until the next peer could be declared dead (for sleeping).
  double time_to_next_deadline(double now) const;

 private:
  double m_dead_after_s;
  std::vector<double> m_last;
  std::vector<char> m_dead, m_retired;
};

// The heartbeat interval for a dead_after_s: several beats fit in the
// window, so one delayed beat is never taken for death.
double heartbeat_interval_s(double dead_after_s);

// Tag of heartbeats on the liveness communicator.
inline constexpr int kTagHeartbeat = 21;

// A thread that sends a 64-byte heartbeat to each of `to` (ranks of `comm`)
// every `interval_s` until stopped. Needs MPI_THREAD_MULTIPLE (the main
// thread keeps using MPI). Beats that a dead peer never receives are
// cancelled at stop.
class Heartbeat {
 public:
  Heartbeat(MPI_Comm comm, std::vector<int> to, double interval_s, int self);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;
  // Stop beating to `rank` (it is dead: its receive buffer is gone).
  void drop(int rank);
  void stop();

 private:
  void run();

  MPI_Comm m_comm;
  std::vector<int> m_to;
  double m_interval_s;
  int m_self;
  std::mutex m_mutex;
  std::condition_variable m_wake;
  bool m_stop = false;
  std::vector<int> m_dropped;
  std::thread m_thread;
};

// What a rank does for liveness, in one object: beats to the ranks that
// watch it (a Heartbeat thread), and watches `peers` (a receive posted for
// each one's heartbeats, and a LivenessCore over them). Ranks are of `comm`,
// a communicator used for heartbeats alone.
class Watch {
 public:
  // beat_to: who watches this rank; peers: whom this rank watches.
  Watch(MPI_Comm comm, int self, std::vector<int> beat_to, std::vector<int> peers,
        double dead_after_s, double now);
  ~Watch();
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;

  // Takes the heartbeats that arrived; returns the peers (ranks) newly
  // declared dead at `now`, each once (their receives are cancelled and no
  // more beats are sent to them).
  std::vector<int> poll(double now);
  // Any other message from `rank` proves it alive too.
  void heard(int rank, double now);
  // `rank` said goodbye: its silence from now on is expected.
  void retire(int rank);
  bool alive(int rank) const;
  double last_heard(int rank) const;
  double time_to_next_deadline(double now) const { return m_core.time_to_next_deadline(now); }
  // Stops beating (at the end, before this rank goes quiet on purpose).
  void stop_beating();

 private:
  int index_of(int rank) const;

  std::vector<int> m_peers;
  LivenessCore m_core;
  RecvSlots m_slots;  // slot i: heartbeats of m_peers[i]
  Heartbeat m_beat;
};

}  // namespace syncopt::comm
