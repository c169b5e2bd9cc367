// The flight recorder (docs/design.md §10): each rank keeps its last
// run.flight_events message events (a send or receive posted, completed or
// cancelled; a collective started and ended) in a ring of plain structs,
// and every operation still in flight in a table beside it, so that a
// receive posted long ago (the one from the rank that stopped) is never
// pushed out of the ring by the traffic that went on without it. Nothing
// is allocated per event: the ring is sized once, the table grows only to
// the most operations in flight at once.
//
// A dump appends the table and the ring, newest last, to
// <run>/flight/rank-<r>.jsonl (docs/outputs.md): when this rank finds a
// peer silent or is told that the run ends (comm::Watch::poll), on SIGUSR2
// (polled there too), and when the run ends on an error or an end-phase
// wait runs out (train/distributed.cpp). `syncopt report` reads them
// (metrics/flight_report.hpp).
//
// Only the thread that runs the rank's role records: the heartbeat thread's
// queues are made with recording off (comm/liveness.cpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include "comm/protocol.hpp"

namespace syncopt::comm::flight {

// What an operation moves. Point to point ones carry the protocol's Kind
// (0 while a receive has not matched a message yet); collectives these.
enum class Op : std::uint8_t { kSend, kRecv, kCollective };
inline constexpr std::uint16_t kAllreduce = 101;  // the gradient (sum or mean)
inline constexpr std::uint16_t kAllgather = 102;  // allreduce mode's per-step exchange
inline constexpr std::uint16_t kBarrier = 103;    // allreduce mode's checkpoint barrier

// A handle to an operation in flight; kNone when the recorder is off.
using Ticket = std::uint32_t;
inline constexpr Ticket kNone = ~Ticket{0};

// What an operation is about: from its header (peer -1: every rank).
struct About {
  int peer = -1;
  int tag = 0;
  std::uint16_t kind = 0;
  std::uint16_t bucket = 0;
  std::uint64_t version = 0;  // param_version, or the step of a collective
  std::uint64_t bytes = 0;
  // A receive: what the same slot received last (kind 0: nothing yet).
  std::uint16_t after_kind = 0;
  std::uint16_t after_bucket = 0;
  std::uint64_t after_version = 0;
};
About about(const MsgHeader& h, int peer, int tag, std::uint64_t bytes);

// Whether the recorder runs (started, with a ring of at least one event).
bool on();
// An operation posted; its ticket for done() or cancelled().
Ticket posted(Op op, const About& a);
// Completed; a receive's `h` (may be null) fills in what it turned out to be.
void done(Ticket t, const MsgHeader* h = nullptr, std::uint64_t bytes = 0);
void cancelled(Ticket t);

// Where and as whom this rank dumps. `name_of(rank)` names a peer
// ("worker 2 (rank 3)"); `now()` is the run's clock (seconds).
struct Setup {
  std::filesystem::path run_dir;
  std::string launch_id;
  int rank = 0;
  std::string role;  // "shard 0", "worker 2", "evaluator"
  std::size_t events = 512;
  std::function<std::string(int)> name_of;
  std::function<double()> now;
};
void start(Setup setup);
// Stops recording and forgets the setup (the end of the roles).
void stop();

// Appends a dump (reason first) to <run>/flight/rank-<r>.jsonl; never
// throws (a full disk is logged). Returns whether it was written.
bool dump(const std::string& reason);
// The same, unless this rank dumped within `quiet_s` (the cause already
// dumped where it was found).
bool dump_unless_recent(const std::string& reason, double quiet_s);
// A SIGUSR2 that arrived since the last look: dumped now. Cheap.
void poll_signal();
// The file this rank dumped to, or empty if it never did.
std::filesystem::path dumped_to();
// One line for an ending message: where the dumps are and how to read them;
// empty if this rank wrote none.
std::string ending_note();

}  // namespace syncopt::comm::flight
