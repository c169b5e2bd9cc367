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
//
// That is sim.link_sharing = "serial". With "fair" the links carry the
// connections in flight at once, as TCP does (docs/design.md §10): every
// pair of nodes is one connection whose messages go in turn (first in,
// first out); the connections sending at a moment share the links max-min
// fairly (progressive filling: the most loaded link's connections get an
// equal share of it, what they leave of their other link goes to that
// link's others, and so on), and every start or end of a message
// recomputes the rates and so the times the others end. A message is
// handed over (send) with the event it delivers; the engine asks when the
// network next changes (next_time) and lets it run to then (advance),
// which delivers the messages whose last byte is in, latency later. A
// message ready before the network's clock starts at the clock (it cannot
// take back a past share).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <unordered_map>
#include <vector>

#include "config/enums.hpp"
#include "sim/events.hpp"

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
  config::LinkSharing sharing = config::LinkSharing::kSerial;
};

NetworkParams network_params(double latency_us, double bandwidth_gbps,
                             config::LinkSharing sharing = config::LinkSharing::kSerial);

// The hosts of `shards` shard nodes (0..S-1) and `workers` worker nodes
// (S..S+K-1): shards fill hosts of `shards_per_host`, then workers fill
// hosts of `workers_per_host` (the last host of each may have fewer).
std::vector<int> host_layout(int shards, int workers, int shards_per_host, int workers_per_host);

class Network {
 public:
  // `host_of[node]`: the host of every node (empty: each its own).
  Network(const NetworkParams& params, int nodes, std::vector<int> host_of = {});
  // Serial: sends `bytes` from node `from` to node `to`, ready at time
  // `ready`; returns the time the last byte arrives.
  double transfer(int from, int to, double ready, double bytes);
  // Seconds one message of `bytes` occupies a link alone.
  double wire_s(double bytes) const;
  const NetworkParams& params() const { return m_params; }
  bool fair() const { return m_params.sharing == config::LinkSharing::kFair; }

  // Fair: hands over a message of `bytes` from `from` to `to`, ready at
  // `ready`, which delivers `e` when it arrives (deliver = false: it only
  // occupies the links). Returns true when its arrival is known at once (a
  // message within one host or over unlimited links): e.t is set, and the
  // caller delivers it.
  bool send(int from, int to, double ready, double bytes, Event& e, bool deliver = true);
  // When a message next starts or ends (infinity: none in flight).
  double next_time();
  // Runs the links to `t` (= next_time()), calling `arrived` with every
  // message delivered then (e.t = its arrival).
  void advance(double t, const std::function<void(const Event&)>& arrived);

 private:
  struct Message {
    double ready = 0.0, bytes = 0.0;
    Event event;
    bool deliver = true;
  };
  struct Flow {
    int out = 0, in = 0;  // link ids: out = host, in = hosts + host
    std::deque<Message> queue;
    bool active = false;  // its head message is on the wire
    bool fixed = false;   // progressive filling: its rate is set
    double left = 0.0;    // bytes of the head still to send
    double rate = 0.0;    // bytes/s
    double end = 0.0;     // when the head ends at this rate
  };
  void share_links();

  NetworkParams m_params;
  std::vector<int> m_host_of;                 // per node
  std::vector<double> m_out_free, m_in_free;  // per host: when its link is next free
  // Fair sharing.
  int m_hosts = 0;
  std::vector<Flow> m_flows;
  std::unordered_map<std::uint64_t, std::size_t> m_flow_of;  // (from, to) -> flow
  std::vector<std::size_t> m_busy;                           // flows with messages
  std::vector<double> m_cap;                                 // per link: left to share
  std::vector<int> m_users;                                  // per link: unfixed flows
  double m_clock = 0.0;
  bool m_dirty = false;
  double m_next = std::numeric_limits<double>::infinity();
};

}  // namespace syncopt::sim
