// The simulated network's links (see network.hpp).
#include "sim/network.hpp"

#include <algorithm>
#include <limits>

namespace syncopt::sim {

NetworkParams network_params(double latency_us, double bandwidth_gbps,
                             config::LinkSharing sharing) {
  return {latency_us * 1e-6, bandwidth_gbps * 1e9 / 8.0, sharing};
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
  m_hosts = hosts;
  m_cap.assign(2 * static_cast<std::size_t>(hosts), 0.0);
  m_users.assign(m_cap.size(), 0);
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

bool Network::send(int from, int to, double ready, double bytes, Event& e, bool deliver) {
  const int a = m_host_of[static_cast<std::size_t>(from)];
  const int b = m_host_of[static_cast<std::size_t>(to)];
  if (a == b || m_params.bytes_per_s <= 0.0) {
    e.t = ready + m_params.latency_s;
    return true;
  }
  const std::uint64_t key =
      static_cast<std::uint64_t>(from) * m_host_of.size() + static_cast<std::uint64_t>(to);
  auto [it, added] = m_flow_of.try_emplace(key, m_flows.size());
  if (added) {
    Flow f;
    f.out = a;
    f.in = m_hosts + b;
    m_flows.push_back(std::move(f));
  }
  Flow& f = m_flows[it->second];
  if (f.queue.empty()) m_busy.push_back(it->second);
  f.queue.push_back({ready, bytes, e, deliver});
  m_dirty = true;
  return false;
}

// Starts every head message that is ready, gives the connections on the
// wire their max-min fair rates, and finds the next start or end.
void Network::share_links() {
  m_dirty = false;
  m_next = std::numeric_limits<double>::infinity();
  std::fill(m_cap.begin(), m_cap.end(), m_params.bytes_per_s);
  std::fill(m_users.begin(), m_users.end(), 0);
  std::size_t unfixed = 0;
  for (const std::size_t i : m_busy) {
    Flow& f = m_flows[i];
    if (!f.active && f.queue.front().ready <= m_clock) {
      f.active = true;
      f.left = f.queue.front().bytes;
    }
    if (!f.active) {
      m_next = std::min(m_next, f.queue.front().ready);
      continue;
    }
    f.fixed = false;
    ++m_users[static_cast<std::size_t>(f.out)];
    ++m_users[static_cast<std::size_t>(f.in)];
    ++unfixed;
  }
  // Progressive filling: the link with the smallest fair share fixes the
  // rate of its connections; their other links lose what they take.
  while (unfixed > 0) {
    std::size_t bottleneck = 0;
    double share = std::numeric_limits<double>::infinity();
    for (std::size_t l = 0; l < m_cap.size(); ++l) {
      if (m_users[l] == 0) continue;
      const double s = std::max(0.0, m_cap[l]) / m_users[l];
      if (s < share) {
        share = s;
        bottleneck = l;
      }
    }
    for (const std::size_t i : m_busy) {
      Flow& f = m_flows[i];
      const auto out = static_cast<std::size_t>(f.out), in = static_cast<std::size_t>(f.in);
      if (!f.active || f.fixed || (out != bottleneck && in != bottleneck)) continue;
      f.fixed = true;
      f.rate = share;
      m_cap[out] -= share;
      m_cap[in] -= share;
      --m_users[out];
      --m_users[in];
      --unfixed;
    }
  }
  for (const std::size_t i : m_busy) {
    Flow& f = m_flows[i];
    if (!f.active) continue;
    f.end = f.rate > 0.0 ? m_clock + f.left / f.rate : std::numeric_limits<double>::infinity();
    m_next = std::min(m_next, f.end);
  }
}

double Network::next_time() {
  if (m_dirty) share_links();
  return m_next;
}

void Network::advance(double t, const std::function<void(const Event&)>& arrived) {
  if (m_dirty) share_links();
  const double dt = t - m_clock;
  m_clock = t;
  std::size_t kept = 0;
  for (std::size_t k = 0; k < m_busy.size(); ++k) {
    const std::size_t i = m_busy[k];
    Flow& f = m_flows[i];
    if (f.active && f.end <= t) {
      Message m = std::move(f.queue.front());
      f.queue.pop_front();
      f.active = false;
      if (m.deliver) {
        m.event.t = t + m_params.latency_s;
        arrived(m.event);
      }
    } else if (f.active) {
      f.left = std::max(0.0, f.left - f.rate * dt);
    }
    if (!f.queue.empty()) m_busy[kept++] = i;
  }
  m_busy.resize(kept);
  m_dirty = true;
}

}  // namespace syncopt::sim
