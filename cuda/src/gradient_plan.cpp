// plan_gradients (see syncopt_cuda/gradient_plan.hpp): plain C++ over the
// graph, no CUDA.
#include "syncopt_cuda/gradient_plan.hpp"

#include <cstddef>

namespace syncopt::cuda {

GradientPlan plan_gradients(const nn::Graph& graph, bool input_grad) {
  const std::size_t count = graph.nodes.size();
  GradientPlan plan;
  plan.into.assign(count, {Delivery::kNone, Delivery::kNone});
  plan.buffer.resize(count);
  for (std::size_t j = 0; j < count; ++j) plan.buffer[j] = static_cast<int>(j);
  std::vector<bool> started(count, false);
  bool input_started = false;
  for (std::size_t j = count; j-- > 0;) {
    const nn::Node& node = graph.nodes[j];
    for (std::size_t slot = 0; slot < node.inputs.size() && slot < 2; ++slot) {
      const int id = node.inputs[slot];
      Delivery& d = plan.into[j][slot];
      if (id == nn::kGraphInput) {
        if (input_grad) d = input_started ? Delivery::kAccumulate : Delivery::kWrite;
        input_started = input_started || input_grad;
        continue;
      }
      const auto k = static_cast<std::size_t>(id);
      const bool alone = graph.consumers_count[k] == 1;
      if (node.type == nn::LayerType::kAdd && slot == 0 && alone && !started[k]) {
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

}  // namespace syncopt::cuda
