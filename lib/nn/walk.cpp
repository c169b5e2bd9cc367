// The shared graph walk (see walk.hpp): plain C++ over the graph.
#include "nn/walk.hpp"

#include <algorithm>

namespace syncopt::nn {

GradientPlan plan_gradients(const Graph& graph, bool input_grad) {
  const std::size_t count = graph.nodes.size();
  GradientPlan plan;
  plan.into.assign(count, {Delivery::kNone, Delivery::kNone});
  plan.buffer.resize(count);
  for (std::size_t j = 0; j < count; ++j) plan.buffer[j] = static_cast<int>(j);
  std::vector<bool> started(count, false);
  bool input_started = false;
  for (std::size_t j = count; j-- > 0;) {
    const Node& node = graph.nodes[j];
    for (std::size_t slot = 0; slot < node.inputs.size() && slot < 2; ++slot) {
      const int id = node.inputs[slot];
      Delivery& d = plan.into[j][slot];
      if (id == kGraphInput) {
        if (input_grad) d = input_started ? Delivery::kAccumulate : Delivery::kWrite;
        input_started = input_started || input_grad;
        continue;
      }
      const auto k = static_cast<std::size_t>(id);
      const bool alone = graph.consumers_count[k] == 1;
      if (node.type == LayerType::kAdd && slot == 0 && alone && !started[k]) {
        d = Delivery::kShared;
        plan.buffer[k] = plan.buffer[j];
      } else {
        d = started[k] ? Delivery::kAccumulate : Delivery::kWrite;
      }
      started[k] = true;
    }
  }
  return plan;
}

std::vector<std::size_t> last_uses(const Graph& graph) {
  const std::size_t count = graph.nodes.size();
  std::vector<std::size_t> last(count);
  for (std::size_t j = 0; j < count; ++j) last[j] = j;
  if (count > 0) last[count - 1] = count;  // the logits live to the end
  for (std::size_t j = 0; j < count; ++j) {
    for (const int in : graph.nodes[j].inputs) {
      if (in != kGraphInput) last[static_cast<std::size_t>(in)] = j;
    }
  }
  for (std::size_t j = count; j-- > 0;) {
    const Node& n = graph.nodes[j];
    if (n.type == LayerType::kDropout && n.inputs[0] != kGraphInput) {
      auto& in_last = last[static_cast<std::size_t>(n.inputs[0])];
      in_last = std::max(in_last, last[j]);
    }
  }
  return last;
}

}  // namespace syncopt::nn
