// libFuzzer target: the protocol's header check (comm::check_header), what
// every received message passes before anything of it is used. The input's
// first 80 bytes are the header as it came off the wire; the bytes after
// them say what the receiver expects (source rank, kinds, shard, the
// gradient's floats, the bytes received, the slice's buckets, the element
// type). A verdict (empty, or one line naming the sender) is an answer; a
// crash or a sanitizer report (an overflow computing sizes) is a finding.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "comm/protocol.hpp"

namespace {

// Reads a T from the input past the header (zero when it has run out).
template <class T>
T take(const std::uint8_t*& p, const std::uint8_t* end) {
  T v{};
  const std::size_t n = std::min<std::size_t>(sizeof(T), static_cast<std::size_t>(end - p));
  std::memcpy(&v, p, n);
  p += n;
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace syncopt::comm;
  if (size < sizeof(MsgHeader)) return 0;
  MsgHeader h;
  std::memcpy(&h, data, sizeof(h));
  const std::uint8_t* p = data + sizeof(h);
  const std::uint8_t* end = data + size;
  Expect e;
  e.source_rank = take<std::uint32_t>(p, end);
  const auto kinds = take<std::uint16_t>(p, end);
  for (int k = 0; k < 16; ++k) {
    if ((kinds >> k) & 1) e.kinds.push_back(static_cast<Kind>(k));
  }
  e.shard = take<std::uint32_t>(p, end);
  e.grad_count = take<std::uint64_t>(p, end);
  e.received_bytes = take<std::int32_t>(p, end);
  e.bf16 = (take<std::uint8_t>(p, end) & 1) != 0;
  std::vector<BucketSpan> buckets;
  const auto nb = take<std::uint8_t>(p, end);
  for (int i = 0; i < nb % 8; ++i) {
    BucketSpan b;
    b.offset = take<std::uint64_t>(p, end);
    b.count = take<std::uint64_t>(p, end);
    buckets.push_back(b);
  }
  if (nb != 0) e.buckets = &buckets;
  (void)check_header(h, e);
  (void)kind_name(h.kind);
  return 0;
}
