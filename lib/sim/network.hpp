// The simulated network (syncopt simulate): every host has one link per
// direction of `bandwidth` bytes/s, and every message pays a one-way
// `latency`. A node (shard or worker) runs on a host; the ranks of one host
// share its link (sim.shards_per_host, sim.workers_per_host: by default
// every node is a host of its own). A message between two hosts occupies
// the sender host's outgoing link and the receiver host's incoming link for
// bytes / bandwidth seconds, first come first served, so a shard that
// answers N+b workers at once sends the replies one after another: the j-th
// leaves j * size / bandwidth after the first. A message between two ranks
// of one host uses no link (the host's own memory), only the latency.
//
//   start   = max(ready, out_free[host(from)], in_free[host(to)])
//   end     = start + bytes / bandwidth          (0 when bandwidth is unlimited)
//   arrival = end + latency;  out_free[host(from)] = in_free[host(to)] = end
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

// The hosts of `shards` shard nodes (0..S-1) and `workers` worker nodes
// (S..S+K-1): shards fill hosts of `shards_per_host`, then workers fill
// hosts of `workers_per_host` (the last host of each may have fewer).
std::vector<int> host_layout(int shards, int workers, int shards_per_host, int workers_per_host);

class Network {
 public:
  // `host_of[node]`: the host of every node (empty: each its own).
  Network(const NetworkParams& params, int nodes, std::vector<int> host_of = {});
  // Sends `bytes` from node `from` to node `to`, ready at time `ready`;
  // returns the time the last byte arrives.
  double transfer(int from, int to, double ready, double bytes);
  // Seconds one message of `bytes` occupies a link.
  double wire_s(double bytes) const;
  const NetworkParams& params() const { return m_params; }

 private:
  NetworkParams m_params;
  std::vector<int> m_host_of;                 // per node
  std::vector<double> m_out_free, m_in_free;  // per host: when its link is next free
};

}  // namespace syncopt::sim
