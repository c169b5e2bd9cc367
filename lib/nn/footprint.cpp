// A network's memory footprint from its graph (see footprint.hpp).
#include "nn/footprint.hpp"

#include <limits>

namespace syncopt::nn {

namespace {

constexpr std::uint64_t kMax = std::numeric_limits<std::uint64_t>::max();

// a * b, saturating.
std::uint64_t times(std::uint64_t a, std::uint64_t b) {
  if (a != 0 && b > kMax / a) return kMax;
  return a * b;
}
std::uint64_t plus(std::uint64_t a, std::uint64_t b) { return b > kMax - a ? kMax : a + b; }

std::uint64_t elements(const std::vector<std::int64_t>& shape) {
  std::uint64_t n = 1;
  for (const auto d : shape) n = times(n, d > 0 ? static_cast<std::uint64_t>(d) : 0);
  return n;
}

}  // namespace

std::uint64_t Footprint::total(std::uint64_t param_copies) const {
  return plus(times(param_bytes, param_copies), activation_bytes);
}

Footprint footprint(const Graph& graph, std::int64_t batch, std::uint64_t param_copies) {
  Footprint f;
  const auto examples = static_cast<std::uint64_t>(batch > 0 ? batch : 1);
  f.param_bytes = times(graph.layout.count, sizeof(float));
  for (const Node& node : graph.nodes) {
    // Its output and the gradient of its output, for every example.
    const std::uint64_t act = times(times(elements(node.out), examples), 2 * sizeof(float));
    const std::uint64_t params = times(times(node.param_count, sizeof(float)), param_copies);
    f.activation_bytes = plus(f.activation_bytes, act);
    if (plus(act, params) > f.largest_bytes || f.largest.empty()) {
      f.largest_bytes = plus(act, params);
      f.largest = "'" + node.name + "'" +
                  (node.layer >= 0 ? " (layer " + std::to_string(node.layer + 1) + ")" : "");
    }
  }
  return f;
}

}  // namespace syncopt::nn
