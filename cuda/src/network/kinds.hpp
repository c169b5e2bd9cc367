// How the CUDA network runs each layer kind: one function per kind and
// stage, found through one table (kinds.cpp, in LayerType order, checked at
// compile time), as the CPU backend's lib/nn/cpu/kinds.hpp.
//
// The stages, for node j (its NodeRt r, its per-batch NodePlan np):
// - setup: descriptors and device scratch of the geometry the graph fixed
//   (null when a kind has none);
// - plan_forward / plan_backward: per batch size, after the network set
//   np.x and np.y (input 0 and output): algorithms, checks of cuDNN's output
//   shape (null when a kind has none);
// - forward / backward: one pass, enqueued on the pass's stream. The walk
//   (which node when, the hooks, the parameter transfers, the fused ReLU's
//   mask in the backward) is the network's (network.cpp, nn/walk.hpp).
#pragma once

#include "rt.hpp"

namespace syncopt::cuda::net {

struct KindOps {
  LayerType type;
  void (*setup)(NodeRt& r, Setup& s);
  void (*plan_forward)(Planner& p, NodeRt& r, NodePlan& np);
  void (*plan_backward)(Planner& p, NodeRt& r, NodePlan& np);
  void (*forward)(const Pass& ps, NodeRt& r, NodePlan& np, std::size_t j);
  void (*backward)(const Pass& ps, NodeRt& r, NodePlan& np, std::size_t j);
};

const KindOps& kind_ops(LayerType type);

namespace weighted {  // conv and fc: weights (with weight norm), bias
void setup(NodeRt& r, Setup& s);
// Before the forward: w = g v / ||v|| into r.w_eff (weight norm); in bf16,
// the weights converted into r.w16.
void forward_weights(const Pass& ps, NodeRt& r);
// After the product: y += bias, fused ReLU.
void forward_bias_act(const Pass& ps, NodeRt& r, void* y, int hw);
// The bias gradient, before the weight gradient.
void backward_bias(const Pass& ps, NodeRt& r, const void* dy);
// Where the FP32 weight gradient goes: r.dw (weight norm) or the gradient.
float* weight_grad(const Pass& ps, NodeRt& r);
// After the weight gradient dw (r.dw with weight norm): dL/dv, dL/dg.
void backward_weight_norm(const Pass& ps, NodeRt& r);
}  // namespace weighted
namespace conv {
void setup(NodeRt& r, Setup& s);
void plan_forward(Planner& p, NodeRt& r, NodePlan& np);
void plan_backward(Planner& p, NodeRt& r, NodePlan& np);
void forward(const Pass& ps, NodeRt& r, NodePlan& np, std::size_t j);
void backward(const Pass& ps, NodeRt& r, NodePlan& np, std::size_t j);
}  // namespace conv
namespace fc {
void forward(const Pass& ps, NodeRt& r, NodePlan& np, std::size_t j);
void backward(const Pass& ps, NodeRt& r, NodePlan& np, std::size_t j);
}  // namespace fc
namespace pool {  // maxpool, avgpool, gap
void setup(NodeRt& r, Setup& s);
void plan_forward(Planner& p, NodeRt& r, NodePlan& np);
void forward(const Pass& ps, NodeRt& r, NodePlan& np, std::size_t j);
void backward(const Pass& ps, NodeRt& r, NodePlan& np, std::size_t j);
}  // namespace pool
namespace batch_norm {
void setup(NodeRt& r, Setup& s);
void forward(const Pass& ps, NodeRt& r, NodePlan& np, std::size_t j);
void backward(const Pass& ps, NodeRt& r, NodePlan& np, std::size_t j);
}  // namespace batch_norm
namespace relu {
void forward(const Pass& ps, NodeRt& r, NodePlan& np, std::size_t j);
void backward(const Pass& ps, NodeRt& r, NodePlan& np, std::size_t j);
}  // namespace relu
namespace gelu {
void forward(const Pass& ps, NodeRt& r, NodePlan& np, std::size_t j);
void backward(const Pass& ps, NodeRt& r, NodePlan& np, std::size_t j);
}  // namespace gelu
namespace add {
void forward(const Pass& ps, NodeRt& r, NodePlan& np, std::size_t j);
void backward(const Pass& ps, NodeRt& r, NodePlan& np, std::size_t j);
}  // namespace add
namespace dropout {
void setup(NodeRt& r, Setup& s);
void forward(const Pass& ps, NodeRt& r, NodePlan& np, std::size_t j);
void backward(const Pass& ps, NodeRt& r, NodePlan& np, std::size_t j);
}  // namespace dropout
namespace flatten {
void forward(const Pass& ps, NodeRt& r, NodePlan& np, std::size_t j);
void backward(const Pass& ps, NodeRt& r, NodePlan& np, std::size_t j);
}  // namespace flatten

}  // namespace syncopt::cuda::net
