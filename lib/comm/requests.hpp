// Nonblocking MPI operations together with the buffers they use, so that a
// buffer can never be freed while MPI still reads or writes it:
//
//   SendQueue  sends in flight, each holding a reference to its message;
//   RecvSlots  one posted receive per peer into a buffer the slot owns.
//
// Both can also move a payload that lives elsewhere, as a message of its own
// after its header (comm::kFlagSplit): a worker sends its gradient from, and
// receives its parameters into, the buffers its network computes with,
// copying nothing. Such a payload is one contiguous buffer, which MPI moves
// with a single copy (a derived datatype of header and payload would make
// it pack and unpack in pieces, each needing both sides' attention). The
// caller hands over shared ownership of the payload's buffer, which the
// queue or slot holds as long as MPI may use it.
//
// Both complete or cancel what is in flight when destroyed. A send that can
// neither complete nor be cancelled in time (a peer that died or stopped)
// hands its buffer to keep_until_finalize() rather than hand MPI freed
// memory: it lives until MPI_Finalize has returned (MpiSession), or until
// the process ends without it. Every MPI return code is checked: errors
// throw InternalError naming the call, except in destructors, which log
// them.
//
// Both record what they post and what completes in the flight recorder
// (comm/flight.hpp) unless made with `record` false (the heartbeats).
#pragma once

#include <mpi.h>

#include <cstddef>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/flight.hpp"
#include "comm/poll.hpp"
#include "comm/protocol.hpp"

namespace syncopt::comm {

using SharedMessage = std::shared_ptr<Message>;

inline SharedMessage make_message(std::size_t capacity, const MsgHeader& header) {
  auto m = std::make_shared<Message>(capacity);
  m->header() = header;
  return m;
}

// A buffer MPI may still read or write (an operation that could neither
// complete nor be cancelled): kept alive until release_kept_buffers(),
// which MpiSession calls once MPI_Finalize has returned. Thread-safe.
void keep_until_finalize(std::shared_ptr<const void> buffer);
// Frees what keep_until_finalize() holds; only after MPI_Finalize.
void release_kept_buffers();

class SendQueue {
 public:
  explicit SendQueue(MPI_Comm comm, bool record = true) : m_comm(comm), m_record(record) {}
  ~SendQueue();
  SendQueue(const SendQueue&) = delete;
  SendQueue& operator=(const SendQueue&) = delete;

  // MPI_Isend of the header and header().count floats of `msg` to `dest`.
  // The queue keeps `msg` alive until the send has completed; the caller
  // must not modify it while use_count() > 1.
  void send(SharedMessage msg, int dest, int tag);
  // The header of `header` alone (its flags must say kFlagSplit), then
  // header().count elements at `payload` (inside `owner`; FP32, or bf16
  // when the flags say kFlagBf16) as the next message to `dest` with the
  // same tag.
  void send_split(SharedMessage header, std::shared_ptr<const void> owner, const void* payload,
                  int dest, int tag);
  // The bytes of `text` alone (MPI_CHAR, no header) to `dest`: the end
  // phase's records. The queue owns the text until the send completes.
  void send_text(std::string text, int dest, int tag);
  // Drops the sends that have completed. Cheap when nothing is in flight.
  void progress();
  std::size_t in_flight() const { return m_entries.size(); }
  // Polls with back-off until every send has completed or `timeout_s` has
  // passed; returns whether all completed.
  bool drain(double timeout_s = std::numeric_limits<double>::infinity());
  // Cancels the sends to `dest` (a peer that will never receive them).
  void cancel_to(int dest);

 private:
  struct Entry {
    MPI_Request req = MPI_REQUEST_NULL;
    SharedMessage msg;
    std::shared_ptr<const void> payload_owner;  // send_split, send_text: where the payload lives
    int dest = -1;
    flight::Ticket flight = flight::kNone;  // a split send's is its payload's
  };
  flight::Ticket record(const MsgHeader& h, int dest, int tag, std::uint64_t bytes) const;
  MPI_Comm m_comm;
  bool m_record = true;
  std::vector<Entry> m_entries;
};

class RecvSlots {
 public:
  explicit RecvSlots(bool record = true) : m_record(record) {}
  ~RecvSlots();
  RecvSlots(const RecvSlots&) = delete;
  RecvSlots& operator=(const RecvSlots&) = delete;

  // A slot receiving from `source` with `tag` on `comm` into a buffer of
  // header + `capacity` floats; returns its index. Not posted yet.
  int add(int source, int tag, MPI_Comm comm, std::size_t capacity);
  void post(int slot);
  // Posts the slot's receive of a split payload (kFlagSplit): `count` floats
  // straight into `payload` (inside `owner`), nothing else. The slot's
  // header stays as the last post() received it; payload(slot) points to
  // `payload`, and raw(slot) is true, until the next post().
  // `elem_bytes`: 4 for FP32, 2 for bf16 (kFlagBf16).
  void post_payload(int slot, std::shared_ptr<void> owner, void* payload, std::size_t count,
                    std::size_t elem_bytes = sizeof(float));
  // The same into the slot's own buffer, after the header it holds.
  void post_payload(int slot, std::size_t count, std::size_t elem_bytes = sizeof(float));
  bool raw(int slot) const { return m_slots[static_cast<std::size_t>(slot)].raw; }
  // The slot's own payload, received as `count` bf16 values (kFlagBf16),
  // widened in place to FP32: payload(slot) then reads floats.
  void widen_bf16(int slot, std::size_t count);
  // Cancels the slot's receive (a peer that will never send); idempotent.
  // Never throws: a receive MPI cannot cancel (matched to a message from a
  // peer that died while sending) is abandoned with its buffer kept.
  void cancel(int slot);
  bool active(int slot) const { return m_reqs[static_cast<std::size_t>(slot)] != MPI_REQUEST_NULL; }
  bool any_active() const;

  struct Done {
    int slot = 0;
    int bytes = 0;  // received
  };
  // The receives that have completed now (possibly none). A completed slot
  // is inactive until posted again.
  std::vector<Done> test();
  // Polls with back-off until at least one completes; empty if none is active.
  std::vector<Done> wait(IdleBackoff& backoff);
  // Polls until every posted receive has completed or `timeout_s` has
  // passed; the ones left are cancelled. Returns whether all completed.
  bool wait_all(double timeout_s);

  const Message& message(int slot) const { return m_slots[static_cast<std::size_t>(slot)].msg; }
  // Where the last receive of the slot put its payload.
  const float* payload(int slot) const {
    const auto& s = m_slots[static_cast<std::size_t>(slot)];
    return s.dest != nullptr ? static_cast<const float*>(s.dest) : s.msg.payload();
  }
  int source(int slot) const { return m_slots[static_cast<std::size_t>(slot)].source; }
  int size() const { return static_cast<int>(m_slots.size()); }

 private:
  struct Slot {
    int source = 0;
    int tag = 0;
    MPI_Comm comm = MPI_COMM_NULL;
    Message msg;
    bool raw = false;                       // post_payload: a payload alone
    void* dest = nullptr;                   // its place, when not the slot's own buffer
    std::shared_ptr<void> dest_owner = {};  // and what keeps that alive
  };
  // Gives up on slot i's receive, which MPI could not cancel: the request is
  // freed (MPI releases it whenever it ends) and the buffer MPI may still
  // write into is kept for the rest of the process; the slot gets a new one.
  void abandon(std::size_t i);
  // The flight recorder's view of slot i's receive just posted.
  void record_post(std::size_t i, const flight::About& a);

  bool m_record = true;
  std::vector<Slot> m_slots;
  std::vector<flight::Ticket> m_flight;  // parallel to m_slots
  std::vector<MPI_Request> m_reqs;       // parallel to m_slots, for MPI_Testsome
  std::vector<int> m_indices;
  std::vector<MPI_Status> m_statuses;
};

// A message of text (MPI_CHAR, of any length) from `from` with `tag`, taken
// whole once it is there (MPI_Iprobe, then MPI_Recv into a string of its
// size); nullopt if none came within `timeout_s`.
std::optional<std::string> receive_text(int from, int tag, MPI_Comm comm, double timeout_s);

}  // namespace syncopt::comm
