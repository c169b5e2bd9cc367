// The wire protocol between workers, parameter-server shards and the
// evaluator (docs/design.md §4): every message is one fixed header followed by
// `count` floats, sent as bytes in a single nonblocking MPI message. Every
// received header is validated before its payload is used.
//
// Gradients and parameters travel in buckets (the pipelined exchange): a
// shard's slice is cut into consecutive runs of whole layers, each its own
// GRAD or PARAMS message that says which bucket of how many it is and where
// its floats go. A worker sends a gradient's buckets top layer first, the
// last one (bucket 0) also asking for newer parameters; a shard sends
// parameters bucket 0 first. Without the pipeline a slice is one bucket.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace syncopt::comm {

inline constexpr std::uint32_t kMagic = 0x53594E43u;  // "SYNC"
inline constexpr std::uint16_t kProtoVersion = 7;
inline constexpr std::uint64_t kAnyVersion = ~std::uint64_t{0};
// CHECKPOINT with this step: no checkpoint is saved, the run just ends.
inline constexpr std::uint64_t kNoCheckpoint = ~std::uint64_t{0};

enum class Kind : std::uint16_t {
  kGrad = 1,       // worker -> shard: gradient slice; also asks for newer parameters
  kPull = 2,       // worker -> shard: parameters newer than param_version, please
  kParams = 3,     // shard -> worker/evaluator: parameter slice (evaluator: theta then EMA)
  kStop = 4,       // shard -> worker/evaluator: training has ended
  kEvalPull = 5,   // evaluator -> shard: theta and EMA at version >= param_version
  kCtrl = 6,       // worker/evaluator -> shard: done, no more messages from me
  kHeartbeat = 7,  // any rank -> its watchers: still alive (comm/liveness.hpp)
  // Stops and checkpoints (docs/design.md §10), coordinated by shard 0:
  kStopRequest = 8,  // any -> shard 0: a stop signal (step_seq) arrived here
  kCheckpoint = 9,   // shard 0 -> shards, evaluator: save your part of checkpoint step_seq
  kSaved = 10,       // any -> shard 0: my part of checkpoint step_seq is written
  // The end phase, point to point (a collective would hang on a dead rank):
  kFinal = 11,     // shard -> eval writer: final theta then EMA of its slice
  kResult = 12,    // eval writer -> rank 0: final test loss/acc of theta and EMA (4 floats)
  kDecision = 13,  // shard 0 -> shards: the workers update `param_version` averages (ids as floats)
  // On the liveness communicator (comm/liveness.hpp), to the ranks that watch the sender:
  kEnding = 14,  // the sender ends the job with `code`; payload: ranks it found dead (as floats)
  // rank 0 -> the ranks that watch it: the records and summary.json are
  // written; a rank that skips MPI_Finalize may exit now (docs/design.md §10).
  kWritten = 15,
};

const char* kind_name(std::uint16_t kind);

// Message tags on the data communicator.
inline constexpr int kTagToShard = 11;
inline constexpr int kTagToWorker = 12;
inline constexpr int kTagToEvaluator = 13;
inline constexpr int kTagEvalNotice = 14;  // shard -> evaluator: training has ended
inline constexpr int kTagCommand = 15;     // shard 0 -> shards, evaluator (CHECKPOINT)
inline constexpr int kTagFinal = 16;       // shard -> eval writer (FINAL)
inline constexpr int kTagResult = 17;      // eval writer -> rank 0 (RESULT)
inline constexpr int kTagRecords = 18;     // shard -> rank 0: its step records, raw bytes
inline constexpr int kTagDecision = 19;    // shard 0 -> shards (DECISION)
inline constexpr int kTagNotice = 22;      // liveness communicator: ENDING, STOP, SAVED, WRITTEN

// Bits of MsgHeader::flags.
inline constexpr std::uint32_t kFlagFinal = 1u;  // PARAMS to the evaluator: training has ended
// A reply to a worker (PARAMS or STOP): save your state as your part of
// checkpoint step_seq before computing on these parameters.
inline constexpr std::uint32_t kFlagCheckpoint = 2u;
// A HEARTBEAT: the sender was not running (stopped, suspended) for longer
// than its peers' silence allows; receivers restart their silence timers.
inline constexpr std::uint32_t kFlagPaused = 4u;
// STOP: some rank of the job died, so MPI_Finalize would wait for it.
inline constexpr std::uint32_t kFlagPeerLost = 8u;
// GRAD, PARAMS: the header travels alone and its `count` floats follow as
// the next message from the same sender with the same tag (raw floats, no
// header), so that they move straight from and into the buffers a network
// computes with (comm/requests.hpp).
inline constexpr std::uint32_t kFlagSplit = 16u;
// GRAD, PARAMS (split only): the payload's `count` elements are bf16 (two
// bytes each, exchange.wire = "bf16"), not FP32.
inline constexpr std::uint32_t kFlagBf16 = 32u;

struct MsgHeader {
  std::uint32_t magic = kMagic;
  std::uint16_t kind = 0;
  std::uint16_t proto_version = kProtoVersion;
  std::uint32_t sender = 0;         // world rank of the sender
  std::uint32_t shard = 0;          // shard index this message concerns
  std::uint64_t param_version = 0;  // version read (GRAD), wanted (PULL), held (PARAMS)
  std::uint64_t step_seq = 0;       // sender's own step counter
  std::uint32_t count = 0;          // floats of payload
  std::uint32_t flags = 0;          // kFlag* bits
  float loss = 0.0f;                // GRAD: the worker's mini-batch loss
  std::uint32_t code = 0;           // STOP, CHECKPOINT: the run's exit code so far
  std::uint64_t examples = 0;       // PARAMS to evaluator: accepted examples so far;
                                    // GRAD: the oldest version the worker held of any shard
  double compute_s = 0.0;           // GRAD: the worker's compute time for this gradient
  double vtime_s = 0.0;             // train.clock = virtual: GRAD, the modelled finish
                                    // time; PARAMS, when the version started
  // GRAD, PARAMS to a worker: where the payload goes (floats into the flat
  // parameter vector) and which bucket of the shard's slice it is, in
  // forward order (bucket 0 holds the slice's first layer).
  std::uint32_t offset = 0;
  std::uint16_t bucket = 0;
  std::uint16_t buckets = 1;
  // GRAD: the worker's phases of the step so far, seconds (complete in the
  // bucket that completes the gradient; docs/outputs.md grads[].phases):
  // with kPhasesSplit forward_s and backward_s apart (a pipelined step),
  // else forward_s holds the whole compute.
  float data_s = 0.0f, forward_s = 0.0f, backward_s = 0.0f, wait_s = 0.0f, send_s = 0.0f;
  std::uint32_t phase_flags = 0;  // kPhases*
};

inline constexpr std::uint32_t kPhasesMeasured = 1u;  // the phase fields hold times
inline constexpr std::uint32_t kPhasesSplit = 2u;     // forward and backward apart

// Bytes of the elements a header announces: `count` of them, two bytes
// each with kFlagBf16, four otherwise.
inline std::size_t element_bytes(const MsgHeader& h) { return (h.flags & kFlagBf16) != 0 ? 2 : 4; }
inline std::size_t payload_bytes(const MsgHeader& h) { return h.count * element_bytes(h); }
static_assert(sizeof(MsgHeader) == 104, "MsgHeader is part of the wire format");

// The one way to start a header: kind, sender (world rank), shard, and the
// version field; the rest zero. Callers fill in what their kind carries.
MsgHeader make_header(Kind kind, int sender, int shard, std::uint64_t param_version = 0);

inline constexpr std::size_t kHeaderFloats = sizeof(MsgHeader) / sizeof(float);

// A message buffer: header and payload contiguous, sized for `capacity` floats.
class Message {
 public:
  explicit Message(std::size_t capacity = 0) : m_storage(kHeaderFloats + capacity) {}
  MsgHeader& header() { return *reinterpret_cast<MsgHeader*>(m_storage.data()); }
  const MsgHeader& header() const { return *reinterpret_cast<const MsgHeader*>(m_storage.data()); }
  float* payload() { return m_storage.data() + kHeaderFloats; }
  const float* payload() const { return m_storage.data() + kHeaderFloats; }
  std::size_t capacity() const { return m_storage.size() - kHeaderFloats; }
  void* data() { return m_storage.data(); }
  // Bytes on the wire for a payload of `count` floats.
  static int wire_bytes(std::size_t count) {
    return static_cast<int>((kHeaderFloats + count) * sizeof(float));
  }
  int max_bytes() const { return static_cast<int>(m_storage.size() * sizeof(float)); }

 private:
  std::vector<float> m_storage;
};

// A bucket as the receiver knows it: where it starts and how many floats.
struct BucketSpan {
  std::size_t offset = 0, count = 0;
};

// What a receiver expects of a message.
struct Expect {
  std::uint32_t source_rank = 0;  // the MPI source the message came from
  std::vector<Kind> kinds;        // allowed kinds
  std::uint32_t shard = 0;        // expected shard index
  std::size_t grad_count = 0;     // floats a GRAD/PARAMS must carry (without buckets)
  int received_bytes = 0;         // MPI_Get_count in bytes (of the header, when split)
  // The buckets of the shard's slice (GRAD, and PARAMS to a worker): when
  // set, a GRAD/PARAMS must name one of them (bucket < buckets, `buckets`
  // equal to their number) and carry exactly its offset and count.
  const std::vector<BucketSpan>* buckets = nullptr;
  // GRAD, PARAMS: the element type the receiver was configured for
  // (exchange.wire); a split payload of the other type is refused.
  bool bf16 = false;
};

// Empty when the header is valid; otherwise one line naming the sender rank
// and what is wrong (bad magic, protocol version, unknown or unexpected kind,
// sender field not the MPI source, wrong shard, a bucket that is not one of
// the slice's, count not matching the slice, the bucket or the bytes
// received).
std::string check_header(const MsgHeader& h, const Expect& e);

}  // namespace syncopt::comm
