// What both network executors (the CPU backend in lib/nn/cpu/, the CUDA one
// in cuda/src/network/) do alike when they run a layer graph (graph.hpp),
// decided once here from the graph alone and tested without a backend:
//
// - the order: the forward pass runs the nodes in the graph's order and asks
//   the StepHooks for a node's parameters just before it; the backward pass
//   runs them in reverse and reports a node's parameter group as final once
//   its backward ran (walk_forward, walk_backward);
// - the gradient of a tensor read by several nodes (plan_gradients): its
//   first contribution in backward order overwrites the tensor's gradient
//   buffer, every later one adds to it; an add passes its output gradient
//   on unchanged, so its input 0, when nothing else reads it, shares the
//   add's gradient buffer instead of receiving a copy (the last batch norm
//   of a residual branch). Only input 0 may share: the add's other input
//   gets a copy at the add's own backward step, before the input-0 side
//   masks the shared buffer in place (a ReLU fused into that side's node);
// - buffer reuse at inference (last_uses): a tensor's buffer is free for
//   another once its last reader ran.
#pragma once

#include <array>
#include <cstddef>
#include <vector>

#include "nn/backend.hpp"
#include "nn/graph.hpp"

namespace syncopt::nn {

enum class Delivery {
  kNone,        // no gradient wanted (the images, unless asked for)
  kWrite,       // the tensor's first contribution: overwrite its gradient
  kAccumulate,  // a later one: add to it
  kShared,      // the add's input 0: its gradient buffer is the add's own
};

struct GradientPlan {
  // Per node, per input slot (2 for an add, else 1; unused slots kNone).
  std::vector<std::array<Delivery, 2>> into;
  // Per node: the node that owns the buffer holding dL/d(its output): itself,
  // or, through kShared, the add it feeds (followed to the end of a chain).
  std::vector<int> buffer;
};

// input_grad: whether dL/dimages is wanted (the images' slots get kWrite /
// kAccumulate rather than kNone).
GradientPlan plan_gradients(const Graph& graph, bool input_grad);

// Per node j: the index of the last node that reads its output (j itself
// when none does; the node count for the last node, whose output, the
// logits, lives to the end). A dropout's output at inference is its input's
// buffer, so its input lives as long as the dropout's output.
std::vector<std::size_t> last_uses(const Graph& graph);

// The forward pass: run_node(j) for every node in order, hooks (when not
// null) asked for node j's parameters just before it.
template <class RunNode>
void walk_forward(const Graph& graph, StepHooks* hooks, RunNode&& run_node) {
  for (std::size_t j = 0; j < graph.nodes.size(); ++j) {
    const Node& node = graph.nodes[j];
    if (hooks != nullptr && node.param_count > 0) {
      hooks->need_params(node.param_offset, node.param_count);
    }
    run_node(j);
  }
}

// The backward pass: run_node(j) for every node in reverse, then, for a node
// with parameters, group_done(j): from there on node j's gradient, and every
// later node's, is final (a backend that runs asynchronously records that
// point; the CPU backend tells the hooks at once).
template <class RunNode, class GroupDone>
void walk_backward(const Graph& graph, RunNode&& run_node, GroupDone&& group_done) {
  for (std::size_t j = graph.nodes.size(); j-- > 0;) {
    run_node(j);
    if (graph.nodes[j].param_count > 0) group_done(j);
  }
}

}  // namespace syncopt::nn
