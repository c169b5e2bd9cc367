// The simulated network's links (see network.hpp).
#include "sim/network.hpp"

#include <algorithm>

namespace syncopt::sim {

NetworkParams network_params(double latency_us, double bandwidth_gbps) {
  return {latency_us * 1e-6, bandwidth_gbps * 1e9 / 8.0};
}

Network::Network(const NetworkParams& params, int nodes)
    : m_params(params),
      m_out_free(static_cast<std::size_t>(nodes), 0.0),
      m_in_free(static_cast<std::size_t>(nodes), 0.0) {}

double Network::wire_s(double bytes) const {
  return m_params.bytes_per_s > 0.0 ? bytes / m_params.bytes_per_s : 0.0;
}

double Network::transfer(int from, int to, double ready, double bytes) {
  double& out = m_out_free[static_cast<std::size_t>(from)];
  double& in = m_in_free[static_cast<std::size_t>(to)];
  const double start = std::max({ready, out, in});
  const double end = start + wire_s(bytes);
  out = end;
  in = end;
  return end + m_params.latency_s;
}

}  // namespace syncopt::sim
