// Telling a silent peer from a slow one (docs/design.md §10). Every worker, the
// evaluator and every shard run a Heartbeat: a thread that sends a small
// message to the ranks that watch it at a fixed interval, whatever the
// main thread is doing (a long compute step does not stop it; a stopped or
// killed process does). The watchers feed what they hear into a
// LivenessCore, which decides, free of MPI, who has been silent for
// cluster.dead_after_s and is dead.
//
// A pause is not a death. When the whole job is stopped and continued
// (scontrol suspend/resume, Ctrl-Z and fg, a paused VM), every rank wakes to
// find all its peers silent for longer than dead_after_s. A rank that was
// itself not running (the heartbeat thread's own rounds show a gap, or the
// boot clock ran ahead of the monotonic one: a suspended machine) restarts
// its silence timers, and its next beats carry a flag that makes its peers
// restart theirs (PauseDetector, Watch::poll, LivenessCore::heartbeat).
//
// The same channel carries notices: a rank that ends the job (an error of
// its own, or a peer it cannot go on without) tells the ranks that watch it
// with an ENDING notice, so that they end at once, saying so in one line,
// instead of each reporting the sender's silence as a new error.
#pragma once

#include <mpi.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/protocol.hpp"
#include "comm/requests.hpp"

namespace syncopt::comm {

// The decision: peers 0..n-1, each alive until silent for dead_after_s.
class LivenessCore {
 public:
  LivenessCore(int peers, double dead_after_s, double now);
  // Anything from `peer` (a heartbeat or any other message) at `now`.
  void heard(int peer, double now);
  // A heartbeat from `peer` at `now`, with its header's flags. kFlagPaused
  // says the peer was not running (docs/design.md §10): the job was stopped
  // and continued, so the silence of the peers not heard from since says
  // nothing either, and every live peer's timer restarts at `now`. This
  // rank may not have seen the pause itself: it was not stopped, or as long,
  // or its heartbeat thread has ended (the end of its part).
  void heartbeat(int peer, double now, std::uint32_t flags);
  // Peers silent for dead_after_s at `now`, each returned once, ever.
  std::vector<int> newly_dead(double now);
  // `peer` said goodbye: it is expected to fall silent, and is not dead.
  void retire(int peer);
  // Every live peer's silence starts again at `now`: this rank (or a peer)
  // was not running, so what it did not hear says nothing of the others.
  void restart(double now);
  bool alive(int peer) const { return !m_dead[static_cast<std::size_t>(peer)]; }
  bool retired(int peer) const { return m_retired[static_cast<std::size_t>(peer)] != 0; }
  double last_heard(int peer) const { return m_last[static_cast<std::size_t>(peer)]; }
  int dead_count() const;
  // Restarts that a peer's kFlagPaused asked for.
  int peer_pauses() const { return m_peer_pauses; }
  // Seconds until the next peer could be declared dead (for sleeping).
  double time_to_next_deadline(double now) const;

 private:
  double m_dead_after_s;
  std::vector<double> m_last;
  std::vector<char> m_dead, m_retired;
  int m_peer_pauses = 0;
};

// Whether this process was not running between two looks at the clocks,
// free of MPI. `mono` is CLOCK_MONOTONIC (it runs while a process is
// stopped, not while the machine is suspended), `boot` CLOCK_BOOTTIME (it
// also runs during a suspend); both in seconds. A gap of more than
// `threshold_s` between two ticks of a thread that ticks far more often, or
// the boot clock running that much further than the monotonic one, is a
// pause.
class PauseDetector {
 public:
  explicit PauseDetector(double threshold_s) : m_threshold_s(threshold_s) {}
  // Returns the length of the pause that ended at this tick, 0 if none.
  double tick(double mono, double boot);
  double threshold_s() const { return m_threshold_s; }

 private:
  double m_threshold_s;
  bool m_started = false;
  double m_mono = 0.0, m_boot = 0.0;
};

// The heartbeat interval for a dead_after_s: several beats fit in the
// window, so one delayed beat is never taken for death.
double heartbeat_interval_s(double dead_after_s);
// The gap that counts as a pause: well above the heartbeat interval (a busy
// machine delays a round, it does not skip four), and well below
// dead_after_s, so that any pause long enough to make a peer look dead is
// seen.
double pause_threshold_s(double dead_after_s);

// Tag of heartbeats on the liveness communicator.
inline constexpr int kTagHeartbeat = 21;

// A thread that sends a 64-byte heartbeat to each of `to` (ranks of `comm`)
// every `interval_s` until stopped. Needs MPI_THREAD_MULTIPLE (the main
// thread keeps using MPI). Beats that a dead peer never receives are
// cancelled at stop. Each round also looks at the clocks (PauseDetector):
// after a pause, the next beat to each peer carries kFlagPaused.
class Heartbeat {
 public:
  Heartbeat(MPI_Comm comm, std::vector<int> to, double interval_s, double pause_threshold_s,
            int self);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;
  // Stop beating to `rank` (it is dead: its receive buffer is gone).
  void drop(int rank);
  void stop();
  // Pauses seen so far, and whether the thread still beats.
  int pauses() const { return m_pauses.load(); }
  bool beating() const { return m_beating.load(); }
  // CLOCK_MONOTONIC seconds of the thread's last round.
  double last_round_s() const { return m_last_round_s.load(); }

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
  PauseDetector m_detector;
  std::atomic<int> m_pauses{0};
  std::atomic<bool> m_beating{true};
  std::atomic<double> m_last_round_s;
  std::thread m_thread;
};

// Seconds of CLOCK_MONOTONIC and CLOCK_BOOTTIME.
double monotonic_s();
double boottime_s();

// A notice from a peer (kTagNotice on the liveness communicator).
// ENDING: the sender ends the job with `code`; STOP (from a shard to its
// workers and the evaluator): its part of the job is over, every one of them
// said goodbye or was found dead; SAVED: a checkpoint part is written.
struct Notice {
  int from = -1;
  Kind kind = Kind::kEnding;
  std::uint32_t code = 0;  // ENDING, STOP: the run's exit code as the sender has it
  std::uint64_t step = 0;  // ENDING: the checkpoint it saved (kNoCheckpoint: none)
  std::vector<int> ranks;  // ENDING, STOP: the ranks the sender found dead
};

// What a rank does for liveness, in one object: beats to the ranks that
// watch it (a Heartbeat thread), and watches `peers` (receives posted for
// each one's heartbeats and notices, and a LivenessCore over them). Ranks
// are of `comm`, a communicator used for heartbeats and notices alone.
class Watch {
 public:
  // beat_to: who watches this rank; peers: whom this rank watches.
  Watch(MPI_Comm comm, int self, std::vector<int> beat_to, std::vector<int> peers,
        double dead_after_s, double now);
  ~Watch();
  Watch(const Watch&) = delete;
  Watch& operator=(const Watch&) = delete;

  // Takes the heartbeats and notices that arrived (the notices are kept for
  // notices()); restarts every silence timer when this process was not
  // running or a peer says it was not; returns the peers (ranks) newly
  // declared dead at `now`, each once (their receives are cancelled and no
  // more beats are sent to them).
  std::vector<int> poll(double now);
  // The notices received since the last call, in arrival order.
  std::vector<Notice> notices();
  // Sends a notice to `rank` (one that watches this rank); `ranks` rides
  // as the payload.
  void notify(int rank, Kind kind, std::uint32_t code, std::uint64_t step,
              const std::vector<int>& ranks = {});
  // Waits up to `limit_s` for the notices sent to be taken; whether they were.
  bool flush(double limit_s);
  // Any other message from `rank` proves it alive too.
  void heard(int rank, double now);
  // `rank` said goodbye: its silence from now on is expected.
  void retire(int rank);
  bool alive(int rank) const;
  double last_heard(int rank) const;
  double time_to_next_deadline(double now) const { return m_core.time_to_next_deadline(now); }
  const std::vector<int>& peers() const { return m_peers; }
  const std::vector<int>& beat_to() const { return m_beat_to; }
  // Every live peer's silence starts at `now` (the caller's clock was set
  // anew: a resumed run continues its time axis).
  void restart_timers(double now);
  // Stops beating (at the end, before this rank goes quiet on purpose).
  void stop_beating();
  // Pauses of this rank, or of a peer that said so, that restarted the timers.
  int restarts() const { return m_restarts + m_core.peer_pauses(); }

 private:
  int index_of(int rank) const;

  int m_self;
  std::vector<int> m_peers, m_beat_to;
  LivenessCore m_core;
  double m_pause_threshold_s;
  std::size_t m_notice_capacity;
  // Not in the flight recorder: heartbeats are no message of the run's.
  RecvSlots m_slots{false};  // slot i: heartbeats of m_peers[i]; n + i: its notices
  SendQueue m_sends;         // notices
  std::vector<Notice> m_notices;
  int m_seen_pauses = 0;
  int m_restarts = 0;
  double m_last_test_s = -1.0;
  Heartbeat m_beat;
};

}  // namespace syncopt::comm
