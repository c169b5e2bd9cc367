// How the CPU backend runs each layer kind: one function per kind and stage,
// found through one table (kinds.cpp, in LayerType order, checked at compile
// time), as ggml's backends answer "how do I run op X".
//
// The stages, for node j of a plan:
// - setup: the batch-independent facts (parameter offsets, window geometry,
//   scratch); null when a kind has none;
// - plan_forward: the forward primitives and the node's output tensor
//   plan.t[j] (from the arena); returns true when the output is its input's
//   buffer (inference dropout);
// - plan_backward: the backward primitives and the transfers of dL/d(each
//   input) (Context::plan_delivery / plan_pass_on), for the slots that get a
//   gradient (Context::wants_grad); the fused ReLU's mask is built before it
//   (unless the kind masks its own, a batch norm's fuse_norm_relu);
// - forward / backward: one step's execution; null runs np.fwd / np.bwd.
// The walk (which node when, the hooks, the fused ReLU's mask, delivering
// the transfers) is the network's (cpu_network.cpp, nn/walk.hpp).
#pragma once

#include "nn/cpu/plan.hpp"

namespace syncopt::nn::cpu {

struct KindOps {
  LayerType type;
  void (*setup)(NodeInfo& info, const ParamLayout& layout);
  bool (*plan_forward)(Context& cx, Plan& plan, std::size_t j, Arena& arena);
  void (*plan_backward)(Context& cx, Plan& plan, std::size_t j);
  void (*forward)(Context& cx, Plan& plan, std::size_t j, const float* params, bool backward);
  void (*backward)(Context& cx, Plan& plan, std::size_t j, const float* params, float* grad);
  bool masks_own_relu = false;
};

const KindOps& kind_ops(LayerType type);

// The kinds' functions (one file each, shared ones where kinds share a
// primitive: conv and fc run their weights alike, the pools one primitive).
namespace weighted {  // conv and fc: weights (with weight norm), bias, fused ReLU
void setup(NodeInfo& info, const ParamLayout& layout);
void forward(Context& cx, Plan& plan, std::size_t j, const float* params, bool backward);
void backward(Context& cx, Plan& plan, std::size_t j, const float* params, float* grad);
// The plain user weights of node j and their reorder into w_md, the input
// reordered into src_md where the primitive wants another layout.
void plan_forward_weights(Context& cx, Plan& plan, std::size_t j, const memory::desc& src_md,
                          const memory::desc& w_md);
// The weight gradient in dw_md, reordered into the user's plain layout.
void plan_weight_grads(Context& cx, Plan& plan, std::size_t j, const memory::desc& dw_md);
// The weights backward-data reads in w_md (shared with the forward's where
// they agree).
void plan_backward_weights(Context& cx, Plan& plan, std::size_t j, const memory::desc& w_md);
}  // namespace weighted
namespace conv {
bool plan_forward(Context& cx, Plan& plan, std::size_t j, Arena& arena);
void plan_backward(Context& cx, Plan& plan, std::size_t j);
}  // namespace conv
namespace fc {
bool plan_forward(Context& cx, Plan& plan, std::size_t j, Arena& arena);
void plan_backward(Context& cx, Plan& plan, std::size_t j);
}  // namespace fc
namespace pool {  // maxpool, avgpool, gap
void setup(NodeInfo& info, const ParamLayout& layout);
bool plan_forward(Context& cx, Plan& plan, std::size_t j, Arena& arena);
void plan_backward(Context& cx, Plan& plan, std::size_t j);
}  // namespace pool
namespace batch_norm {
void setup(NodeInfo& info, const ParamLayout& layout);
bool plan_forward(Context& cx, Plan& plan, std::size_t j, Arena& arena);
void plan_backward(Context& cx, Plan& plan, std::size_t j);
void forward(Context& cx, Plan& plan, std::size_t j, const float* params, bool backward);
void backward(Context& cx, Plan& plan, std::size_t j, const float* params, float* grad);
}  // namespace batch_norm
namespace eltwise {  // shared by relu and gelu
bool plan_forward(Context& cx, Plan& plan, std::size_t j, Arena& arena, dnnl::algorithm alg);
// from_dst: the backward reads the output (ReLU), else the input (GELU).
void plan_backward(Context& cx, Plan& plan, std::size_t j, dnnl::algorithm alg, bool from_dst);
}  // namespace eltwise
namespace relu {
bool plan_forward(Context& cx, Plan& plan, std::size_t j, Arena& arena);
void plan_backward(Context& cx, Plan& plan, std::size_t j);
// The backward of a ReLU fused into node j (a post-op of its forward).
void plan_fused_mask(Context& cx, Plan& plan, std::size_t j);
}  // namespace relu
namespace gelu {
bool plan_forward(Context& cx, Plan& plan, std::size_t j, Arena& arena);
void plan_backward(Context& cx, Plan& plan, std::size_t j);
}  // namespace gelu
namespace add {
bool plan_forward(Context& cx, Plan& plan, std::size_t j, Arena& arena);
void plan_backward(Context& cx, Plan& plan, std::size_t j);
void forward(Context& cx, Plan& plan, std::size_t j, const float* params, bool backward);
}  // namespace add
namespace dropout {
bool plan_forward(Context& cx, Plan& plan, std::size_t j, Arena& arena);
void plan_backward(Context& cx, Plan& plan, std::size_t j);
void forward(Context& cx, Plan& plan, std::size_t j, const float* params, bool backward);
void backward(Context& cx, Plan& plan, std::size_t j, const float* params, float* grad);
}  // namespace dropout
namespace flatten {
bool plan_forward(Context& cx, Plan& plan, std::size_t j, Arena& arena);
void plan_backward(Context& cx, Plan& plan, std::size_t j);
}  // namespace flatten

}  // namespace syncopt::nn::cpu
