// The simulated network (syncopt simulate): every node (shard or worker) has
// one link per direction of `bandwidth` bytes/s, and every message pays a
// one-way `latency`. A message occupies the sender's outgoing link and the
// receiver's incoming link for bytes / bandwidth seconds, first come first
// served, so a shard that answers N+b workers at once sends the replies one
// after another: the j-th leaves j * size / bandwidth after the first.
//
//   start   = max(ready, out_free[from], in_free[to])
//   end     = start + bytes / bandwidth          (0 when bandwidth is unlimited)
//   arrival = end + latency;  out_free[from] = in_free[to] = end
#pragma once

#include <cstddef>
#include <vector>

namespace syncopt::sim {

// Bytes of a message carrying `floats` floats: the 64-byte wire header
// (comm/protocol.hpp's MsgHeader) and the payload.
inline constexpr double kHeaderBytes = 64.0;
inline double message_bytes(std::size_t floats) {
  return kHeaderBytes + 4.0 * static_cast<double>(floats);
}

struct NetworkParams {
  double latency_s = 0.0;
  double bytes_per_s = 0.0;  // 0 = unlimited: no transfer time, latency only
};

NetworkParams network_params(double latency_us, double bandwidth_gbps);

class Network {
 public:
  Network(const NetworkParams& params, int nodes);
  // Sends `bytes` from node `from` to node `to`, ready at time `ready`;
  // returns the time the last byte arrives.
  double transfer(int from, int to, double ready, double bytes);
  // Seconds one message of `bytes` occupies a link.
  double wire_s(double bytes) const;
  const NetworkParams& params() const { return m_params; }

 private:
  NetworkParams m_params;
  std::vector<double> m_out_free, m_in_free;  // per node: when its link is next free
};

}  // namespace syncopt::sim
