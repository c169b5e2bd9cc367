// How the CUDA network's backward pass delivers dL/d(tensor) for a layer
// graph (nn/graph.hpp), decided once from the graph alone, so that it is
// tested without a GPU (tests/cuda/test_cuda_logic.cpp).
//
// The backward runs the nodes in reverse. A tensor read by k nodes gets k
// contributions, which must add up: the first one (in backward order)
// overwrites its gradient buffer (cuDNN / cuBLAS beta = 0), every later one
// adds to it (beta = 1, or an accumulating kernel). An add passes its
// output gradient on unchanged, so its input 0, when nothing else reads it,
// shares the add's gradient buffer instead of receiving a copy (the last
// batch norm of a residual branch). Only input 0 may share: the add's other
// input gets a copy at the add's own backward step, before the input-0 side
// masks the shared buffer in place (a ReLU fused into that side's node).
#pragma once

#include <array>
#include <vector>

#include "nn/graph.hpp"

namespace syncopt::cuda {

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
GradientPlan plan_gradients(const nn::Graph& graph, bool input_grad);

}  // namespace syncopt::cuda
