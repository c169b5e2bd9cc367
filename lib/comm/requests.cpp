// Owning request sets (see requests.hpp).
#include "comm/requests.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>
#include <utility>

#include "comm/mpi.hpp"
#include "common/bf16.hpp"
#include "common/error.hpp"

namespace syncopt::comm {

namespace {

// How long a destructor waits for cancelled operations to be acknowledged.
constexpr double kCancelWaitS = 1.0;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Cancels `req` and waits a bounded time for MPI to let go of its buffer.
// Returns whether it did; never throws (runs in destructors).
bool cancel_bounded(MPI_Request& req) {
  if (req == MPI_REQUEST_NULL) return true;
  int done = 0;
  if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) return true;
  if (MPI_Cancel(&req) != MPI_SUCCESS) spdlog::warn("MPI_Cancel failed while cleaning up");
  const auto t0 = std::chrono::steady_clock::now();
  IdleBackoff backoff;
  while (seconds_since(t0) < kCancelWaitS) {
    if (MPI_Test(&req, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS) return false;
    if (done) return true;
    backoff.idle();
  }
  return false;
}

// What keep_until_finalize() holds.
struct KeptBuffers {
  std::mutex mutex;
  std::vector<std::shared_ptr<const void>> buffers;
};

KeptBuffers& kept() {
  static KeptBuffers k;  // outlives every request set: freed at exit, if not before
  return k;
}

}  // namespace

void keep_until_finalize(std::shared_ptr<const void> buffer) {
  if (!buffer) return;
  KeptBuffers& k = kept();
  const std::lock_guard<std::mutex> lock(k.mutex);
  k.buffers.push_back(std::move(buffer));
}

void release_kept_buffers() {
  KeptBuffers& k = kept();
  const std::lock_guard<std::mutex> lock(k.mutex);
  k.buffers.clear();
}

// ------------------------------------------------------------------ SendQueue

flight::Ticket SendQueue::record(const MsgHeader& h, int dest, int tag, std::uint64_t bytes) const {
  if (!m_record || !flight::on()) return flight::kNone;
  return flight::posted(flight::Op::kSend, flight::about(h, dest, tag, bytes));
}

void SendQueue::send(SharedMessage msg, int dest, int tag) {
  Entry e;
  e.dest = dest;
  e.flight = record(msg->header(), dest, tag,
                    static_cast<std::uint64_t>(Message::wire_bytes(msg->header().count)));
  SYNCOPT_CHECK_MPI(MPI_Isend(msg->data(), Message::wire_bytes(msg->header().count), MPI_BYTE, dest,
                              tag, m_comm, &e.req));
  e.msg = std::move(msg);
  m_entries.push_back(std::move(e));
}

void SendQueue::send_split(SharedMessage header, std::shared_ptr<const void> owner,
                           const void* payload, int dest, int tag) {
  if ((header->header().flags & kFlagSplit) == 0) {
    throw InternalError("SendQueue::send_split of a header without kFlagSplit");
  }
  const int bytes = static_cast<int>(payload_bytes(header->header()));
  Entry h;
  h.dest = dest;
  SYNCOPT_CHECK_MPI(
      MPI_Isend(header->data(), sizeof(MsgHeader), MPI_BYTE, dest, tag, m_comm, &h.req));
  h.msg = std::move(header);
  m_entries.push_back(std::move(h));
  Entry p;
  p.dest = dest;
  p.flight = record(m_entries.back().msg->header(), dest, tag,
                    sizeof(MsgHeader) + static_cast<std::uint64_t>(bytes));
  SYNCOPT_CHECK_MPI(MPI_Isend(payload, bytes, MPI_BYTE, dest, tag, m_comm, &p.req));
  p.payload_owner = std::move(owner);
  m_entries.push_back(std::move(p));
}

void SendQueue::send_text(std::string text, int dest, int tag) {
  auto owned = std::make_shared<const std::string>(std::move(text));
  Entry e;
  e.dest = dest;
  e.flight = record(MsgHeader{}, dest, tag, owned->size());
  SYNCOPT_CHECK_MPI(MPI_Isend(owned->data(), static_cast<int>(owned->size()), MPI_CHAR, dest, tag,
                              m_comm, &e.req));
  e.payload_owner = std::move(owned);
  m_entries.push_back(std::move(e));
}

void SendQueue::progress() {
  if (m_entries.empty()) return;
  for (auto& e : m_entries) {
    int done = 0;
    SYNCOPT_CHECK_MPI(MPI_Test(&e.req, &done, MPI_STATUS_IGNORE));
    if (done) flight::done(std::exchange(e.flight, flight::kNone));
  }
  std::erase_if(m_entries, [](const Entry& e) { return e.req == MPI_REQUEST_NULL; });
}

bool SendQueue::drain(double timeout_s) {
  const auto t0 = std::chrono::steady_clock::now();
  IdleBackoff backoff;
  for (;;) {
    progress();
    if (m_entries.empty()) return true;
    if (seconds_since(t0) >= timeout_s) return false;
    backoff.idle();
  }
}

void SendQueue::cancel_to(int dest) {
  for (auto& e : m_entries) {
    if (e.dest != dest) continue;
    flight::cancelled(std::exchange(e.flight, flight::kNone));
    if (!cancel_bounded(e.req)) {
      // MPI still holds the buffers: keep them alive until MPI_Finalize.
      keep_until_finalize(std::move(e.msg));
      keep_until_finalize(std::move(e.payload_owner));
      e.req = MPI_REQUEST_NULL;
    }
  }
  std::erase_if(m_entries, [](const Entry& e) { return e.req == MPI_REQUEST_NULL; });
}

SendQueue::~SendQueue() {
  std::size_t leaked = 0;
  for (auto& e : m_entries) {
    if (!cancel_bounded(e.req)) {
      keep_until_finalize(std::move(e.msg));
      keep_until_finalize(std::move(e.payload_owner));
      ++leaked;
    }
  }
  if (leaked > 0) {
    spdlog::warn(
        "{} send(s) could neither complete nor be cancelled (a peer gone?); their "
        "buffers are kept until MPI_Finalize",
        leaked);
  }
}

// ------------------------------------------------------------------ RecvSlots

int RecvSlots::add(int source, int tag, MPI_Comm comm, std::size_t capacity) {
  m_slots.push_back(Slot{source, tag, comm, Message(capacity)});
  m_reqs.push_back(MPI_REQUEST_NULL);
  m_flight.push_back(flight::kNone);
  return static_cast<int>(m_slots.size()) - 1;
}

void RecvSlots::record_post(std::size_t i, const flight::About& a) {
  if (m_record && flight::on()) m_flight[i] = flight::posted(flight::Op::kRecv, a);
}

void RecvSlots::post(int slot) {
  auto& s = m_slots[static_cast<std::size_t>(slot)];
  auto& req = m_reqs[static_cast<std::size_t>(slot)];
  if (req != MPI_REQUEST_NULL) throw InternalError("RecvSlots::post on a slot still posted");
  if (m_record && flight::on()) {
    // Not known until a message matches; what the slot received last is.
    flight::About a;
    a.peer = s.source;
    a.tag = s.tag;
    const MsgHeader& last = s.msg.header();
    if (last.magic == kMagic) {
      a.after_kind = last.kind;
      a.after_bucket = last.bucket;
      a.after_version = last.param_version;
    }
    record_post(static_cast<std::size_t>(slot), a);
  }
  s.raw = false;
  s.dest = nullptr;
  s.dest_owner.reset();
  SYNCOPT_CHECK_MPI(
      MPI_Irecv(s.msg.data(), s.msg.max_bytes(), MPI_BYTE, s.source, s.tag, s.comm, &req));
}

void RecvSlots::post_payload(int slot, std::shared_ptr<void> owner, void* payload,
                             std::size_t count, std::size_t elem_bytes) {
  auto& s = m_slots[static_cast<std::size_t>(slot)];
  auto& req = m_reqs[static_cast<std::size_t>(slot)];
  if (req != MPI_REQUEST_NULL)
    throw InternalError("RecvSlots::post_payload on a slot still posted");
  s.raw = true;
  s.dest = payload;
  s.dest_owner = std::move(owner);
  record_post(static_cast<std::size_t>(slot),
              flight::about(s.msg.header(), s.source, s.tag, count * elem_bytes));
  SYNCOPT_CHECK_MPI(MPI_Irecv(payload, static_cast<int>(count * elem_bytes), MPI_BYTE, s.source,
                              s.tag, s.comm, &req));
}

void RecvSlots::post_payload(int slot, std::size_t count, std::size_t elem_bytes) {
  auto& s = m_slots[static_cast<std::size_t>(slot)];
  auto& req = m_reqs[static_cast<std::size_t>(slot)];
  if (req != MPI_REQUEST_NULL)
    throw InternalError("RecvSlots::post_payload on a slot still posted");
  if (count > s.msg.capacity()) {
    throw InternalError("RecvSlots::post_payload of " + std::to_string(count) +
                        " floats into a slot of " + std::to_string(s.msg.capacity()));
  }
  s.raw = true;
  s.dest = nullptr;
  s.dest_owner.reset();
  record_post(static_cast<std::size_t>(slot),
              flight::about(s.msg.header(), s.source, s.tag, count * elem_bytes));
  SYNCOPT_CHECK_MPI(MPI_Irecv(s.msg.payload(), static_cast<int>(count * elem_bytes), MPI_BYTE,
                              s.source, s.tag, s.comm, &req));
}

void RecvSlots::widen_bf16(int slot, std::size_t count) {
  auto& s = m_slots[static_cast<std::size_t>(slot)];
  if (!s.raw || s.dest != nullptr || count > s.msg.capacity()) {
    throw InternalError("RecvSlots::widen_bf16 of a slot without its own payload of " +
                        std::to_string(count) + " values");
  }
  // The bf16 values fill the first half of the buffer; from the last one
  // down, each float lands where no unread value is left.
  float* out = s.msg.payload();
  const auto* bytes = reinterpret_cast<const unsigned char*>(out);
  for (std::size_t i = count; i-- > 0;) {
    std::uint16_t h;
    std::memcpy(&h, bytes + 2 * i, sizeof h);
    out[i] = bf16::to_float(h);
  }
}

void RecvSlots::cancel(int slot) {
  // A receive already matched to a message the peer was sending when it died
  // (Open MPI then prints "Read -1, expected N, errno = 3") cannot be
  // cancelled and may never complete; the run goes on without that peer.
  const auto i = static_cast<std::size_t>(slot);
  if (m_reqs[i] != MPI_REQUEST_NULL) flight::cancelled(std::exchange(m_flight[i], flight::kNone));
  if (!cancel_bounded(m_reqs[i])) abandon(i);
  m_reqs[i] = MPI_REQUEST_NULL;
}

void RecvSlots::abandon(std::size_t i) {
  auto& s = m_slots[i];
  (void)MPI_Request_free(&m_reqs[i]);  // best effort: the buffer is kept either way
  m_reqs[i] = MPI_REQUEST_NULL;
  const std::size_t capacity = s.msg.capacity();
  // Moving the Message keeps its heap storage where it is.
  keep_until_finalize(std::make_shared<const Message>(std::move(s.msg)));
  keep_until_finalize(std::move(s.dest_owner));  // post_payload's buffer
  s.dest = nullptr;
  s.raw = false;
  s.msg = Message(capacity);
  spdlog::warn(
      "a receive from rank {} could not be cancelled (mid-message from a peer that died?); its "
      "buffer ({} bytes) is kept until MPI_Finalize",
      s.source, Message::wire_bytes(capacity));
}

bool RecvSlots::any_active() const {
  return std::any_of(m_reqs.begin(), m_reqs.end(),
                     [](MPI_Request r) { return r != MPI_REQUEST_NULL; });
}

std::vector<RecvSlots::Done> RecvSlots::test() {
  std::vector<Done> out;
  if (!any_active()) return out;
  m_indices.resize(m_reqs.size());
  m_statuses.resize(m_reqs.size());
  int outcount = 0;
  const int rc = MPI_Testsome(static_cast<int>(m_reqs.size()), m_reqs.data(), &outcount,
                              m_indices.data(), m_statuses.data());
  if (rc == MPI_ERR_IN_STATUS) {
    // A receive failed, typically a message longer than the receive buffer:
    // name the sender, since that rank is the one sending malformed data.
    for (int j = 0; j < outcount; ++j) {
      const MPI_Status& st = m_statuses[static_cast<std::size_t>(j)];
      if (st.MPI_ERROR == MPI_SUCCESS) continue;
      char text[MPI_MAX_ERROR_STRING] = "unknown error";
      int len = 0;
      (void)MPI_Error_string(st.MPI_ERROR, text, &len);  // only improves the message
      throw InternalError("message from rank " + std::to_string(st.MPI_SOURCE) +
                          " could not be received: " + text +
                          " (longer than any message of this protocol: a corrupt count or a "
                          "different syncopt build on that rank)");
    }
  }
  SYNCOPT_CHECK_MPI(rc);
  if (outcount == MPI_UNDEFINED) return out;
  for (int j = 0; j < outcount; ++j) {
    Done d;
    d.slot = m_indices[static_cast<std::size_t>(j)];
    SYNCOPT_CHECK_MPI(MPI_Get_count(&m_statuses[static_cast<std::size_t>(j)], MPI_BYTE, &d.bytes));
    if (const auto si = static_cast<std::size_t>(d.slot); m_flight[si] != flight::kNone) {
      const Slot& s = m_slots[si];
      flight::done(std::exchange(m_flight[si], flight::kNone), s.raw ? nullptr : &s.msg.header(),
                   static_cast<std::uint64_t>(d.bytes));
    }
    out.push_back(d);
  }
  return out;
}

std::vector<RecvSlots::Done> RecvSlots::wait(IdleBackoff& backoff) {
  for (;;) {
    if (!any_active()) return {};
    auto done = test();
    if (!done.empty()) {
      backoff.busy();
      return done;
    }
    backoff.idle();
  }
}

bool RecvSlots::wait_all(double timeout_s) {
  const auto t0 = std::chrono::steady_clock::now();
  IdleBackoff backoff;
  while (any_active()) {
    if (!test().empty()) continue;
    if (seconds_since(t0) > timeout_s) {
      for (int i = 0; i < size(); ++i) cancel(i);
      return false;
    }
    backoff.idle(0.01);
  }
  return true;
}

RecvSlots::~RecvSlots() {
  for (std::size_t i = 0; i < m_reqs.size(); ++i) {
    if (!cancel_bounded(m_reqs[i])) abandon(i);
  }
}

std::optional<std::string> receive_text(int from, int tag, MPI_Comm comm, double timeout_s) {
  const auto t0 = std::chrono::steady_clock::now();
  IdleBackoff backoff;
  for (;;) {
    int flag = 0;
    MPI_Status st;
    SYNCOPT_CHECK_MPI(MPI_Iprobe(from, tag, comm, &flag, &st));
    if (flag) {
      int n = 0;
      SYNCOPT_CHECK_MPI(MPI_Get_count(&st, MPI_CHAR, &n));
      std::string text(static_cast<std::size_t>(n), '\0');
      SYNCOPT_CHECK_MPI(MPI_Recv(text.data(), n, MPI_CHAR, from, tag, comm, MPI_STATUS_IGNORE));
      return text;
    }
    if (seconds_since(t0) > timeout_s) return std::nullopt;
    backoff.idle(0.01);
  }
}

}  // namespace syncopt::comm
