// Header validation for the wire protocol (see protocol.hpp).
#include "comm/protocol.hpp"

#include <algorithm>
#include <cstdio>

namespace syncopt::comm {

const char* kind_name(std::uint16_t kind) {
  switch (static_cast<Kind>(kind)) {
    case Kind::kGrad:
      return "GRAD";
    case Kind::kPull:
      return "PULL";
    case Kind::kParams:
      return "PARAMS";
    case Kind::kStop:
      return "STOP";
    case Kind::kEvalPull:
      return "EVAL_PULL";
    case Kind::kCtrl:
      return "CTRL";
    case Kind::kHeartbeat:
      return "HEARTBEAT";
    case Kind::kStopRequest:
      return "STOP_REQUEST";
    case Kind::kCheckpoint:
      return "CHECKPOINT";
    case Kind::kSaved:
      return "SAVED";
    case Kind::kFinal:
      return "FINAL";
    case Kind::kResult:
      return "RESULT";
    case Kind::kDecision:
      return "DECISION";
    case Kind::kEnding:
      return "ENDING";
    case Kind::kWritten:
      return "WRITTEN";
  }
  return "unknown";
}

MsgHeader make_header(Kind kind, int sender, int shard, std::uint64_t param_version) {
  MsgHeader h;
  h.kind = static_cast<std::uint16_t>(kind);
  h.sender = static_cast<std::uint32_t>(sender);
  h.shard = static_cast<std::uint32_t>(shard);
  h.param_version = param_version;
  return h;
}

std::string check_header(const MsgHeader& h, const Expect& e) {
  char buf[256];
  const std::string from = "message from rank " + std::to_string(e.source_rank) + ": ";
  if (e.received_bytes < static_cast<int>(sizeof(MsgHeader))) {
    return from + "only " + std::to_string(e.received_bytes) + " bytes, shorter than the " +
           std::to_string(sizeof(MsgHeader)) + "-byte header";
  }
  if (h.magic != kMagic) {
    std::snprintf(buf, sizeof(buf), "bad magic 0x%08x (expected 0x%08x): not a syncopt message",
                  h.magic, kMagic);
    return from + buf;
  }
  if (h.proto_version != kProtoVersion) {
    return from + "protocol version " + std::to_string(h.proto_version) + ", this binary speaks " +
           std::to_string(kProtoVersion) + ": run the same syncopt build on every rank";
  }
  const auto kind = static_cast<Kind>(h.kind);
  if (std::string(kind_name(h.kind)) == "unknown") {
    return from + "unknown message kind " + std::to_string(h.kind);
  }
  if (std::find(e.kinds.begin(), e.kinds.end(), kind) == e.kinds.end()) {
    return from + "unexpected message kind " + kind_name(h.kind) + " here";
  }
  if (h.sender != e.source_rank) {
    return from + "header claims sender rank " + std::to_string(h.sender);
  }
  if (h.shard != e.shard) {
    return from + "header is for shard " + std::to_string(h.shard) + ", received by shard " +
           std::to_string(e.shard);
  }
  const bool carries =
      kind == Kind::kGrad || kind == Kind::kParams || kind == Kind::kFinal || kind == Kind::kResult;
  std::size_t want = carries ? e.grad_count : 0;
  if (e.buckets != nullptr && (kind == Kind::kGrad || kind == Kind::kParams)) {
    const auto& b = *e.buckets;
    if (h.buckets != b.size() || h.bucket >= b.size()) {
      return from + kind_name(h.kind) + " is bucket " + std::to_string(h.bucket) + " of " +
             std::to_string(h.buckets) + ", but this slice has " + std::to_string(b.size()) +
             " bucket(s) (exchange.pipeline / exchange.bucket_bytes differ between ranks?)";
    }
    const BucketSpan& span = b[h.bucket];
    if (h.offset != span.offset) {
      return from + kind_name(h.kind) + " bucket " + std::to_string(h.bucket) + " starts at " +
             std::to_string(h.offset) + ", expected " + std::to_string(span.offset);
    }
    want = span.count;
  }
  // DECISION, ENDING and the liveness STOP notice name ranks: up to the capacity.
  const bool up_to = kind == Kind::kDecision || kind == Kind::kEnding || kind == Kind::kStop;
  if (up_to ? h.count > e.grad_count : h.count != want) {
    return from + kind_name(h.kind) + " carries " + std::to_string(h.count) + " floats, expected " +
           std::to_string(want);
  }
  // A split payload follows on its own (GRAD and PARAMS only).
  const bool split = (h.flags & kFlagSplit) != 0;
  if (split && kind != Kind::kGrad && kind != Kind::kParams) {
    return from + kind_name(h.kind) +
           " says its payload follows apart, which only GRAD and "
           "PARAMS may";
  }
  const bool bf16 = (h.flags & kFlagBf16) != 0;
  if (bf16 && !split) {
    return from + kind_name(h.kind) + " says bf16 elements inline, which only a split payload may";
  }
  if ((kind == Kind::kGrad || kind == Kind::kParams) && bf16 != e.bf16) {
    return from + kind_name(h.kind) + " carries " + (bf16 ? "bf16" : "fp32") +
           " elements, this rank expects " + (e.bf16 ? "bf16" : "fp32") +
           " (exchange.wire differs between ranks?)";
  }
  const int header_bytes = split ? Message::wire_bytes(0) : Message::wire_bytes(h.count);
  if (e.received_bytes != header_bytes) {
    return from + "received " + std::to_string(e.received_bytes) + " bytes, header says " +
           std::to_string(header_bytes);
  }
  return {};
}

}  // namespace syncopt::comm
