// The simulated network's links (see network.hpp).
#include "sim/network.hpp"

#include <algorithm>

namespace syncopt::sim {

NetworkParams network_params(double latency_us, double bandwidth_gbps) {
  return {latency_us * 1e-6, bandwidth_gbps * 1e9 / 8.0};
}

std::vector<int> host_layout(int shards, int workers, int shards_per_host, int workers_per_host) {
  std::vector<int> host_of;
  host_of.reserve(static_cast<std::size_t>(shards + workers));
  for (int s = 0; s < shards; ++s) host_of.push_back(s / std::max(1, shards_per_host));
  const int first = shards > 0 ? host_of.back() + 1 : 0;
  for (int w = 0; w < workers; ++w) host_of.push_back(first + w / std::max(1, workers_per_host));
  return host_of;
}

Network::Network(const NetworkParams& params, int nodes, std::vector<int> host_of)
    : m_params(params), m_host_of(std::move(host_of)) {
  if (m_host_of.empty()) {
    for (int n = 0; n < nodes; ++n) m_host_of.push_back(n);
  }
  const int hosts = *std::max_element(m_host_of.begin(), m_host_of.end()) + 1;
  m_out_free.assign(static_cast<std::size_t>(hosts), 0.0);
  m_in_free.assign(static_cast<std::size_t>(hosts), 0.0);
}

double Network::wire_s(double bytes) const {
  return m_params.bytes_per_s > 0.0 ? bytes / m_params.bytes_per_s : 0.0;
}

double Network::transfer(int from, int to, double ready, double bytes) {
  const int a = m_host_of[static_cast<std::size_t>(from)];
  const int b = m_host_of[static_cast<std::size_t>(to)];
  if (a == b) return ready + m_params.latency_s;  // within one host: no link
  double& out = m_out_free[static_cast<std::size_t>(a)];
  double& in = m_in_free[static_cast<std::size_t>(b)];
  const double start = std::max({ready, out, in});
  const double end = start + wire_s(bytes);
  out = end;
  in = end;
  return end + m_params.latency_s;
}

}  // namespace syncopt::sim
