// The CPU backend's plans (see cpu_network.cpp for the design): what every
// layer kind's functions (kinds.hpp) build and run, and the Context they
// share: the oneDNN engine and stream, the graph, the per-node facts, and
// the helpers that make reorders, user memories and gradient transfers.
//
// Per batch size a Plan holds every primitive, memory object and reorder,
// so a step allocates nothing. A NodePlan has the slots of every kind (a
// kind uses those it needs); an Exec is one primitive with its arguments.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "nn/backend.hpp"
#include "nn/graph.hpp"
#include "nn/walk.hpp"

namespace syncopt::nn::cpu {

using dnnl::memory;
using Tag = memory::format_tag;
using Dt = memory::data_type;

// Plain (row-major) and oneDNN's-choice layouts; the data type is FP32 for
// parameters, gradients, images and logits, Context::act for activations.
memory::desc plain_desc(const memory::dims& dims, Dt dt = Dt::f32);
memory::desc any_desc(const memory::dims& dims, Dt dt = Dt::f32);
// Elements (of the memory's own type) and a float view (FP32 memories only).
std::int64_t element_count(const memory& m);
float* data_of(const memory& m);
// {n, shape...}: a graph shape (no batch) with the batch dimension in front.
memory::dims with_batch(memory::dim n, const std::vector<std::int64_t>& shape);
// A user scratchpad; with relu, a ReLU post-op (the graph's fused ReLU).
dnnl::primitive_attr make_attr(bool relu);

// Whether oneDNN chose its reference (slow, generic) implementation.
template <class Pd>
bool is_reference(const Pd& pd) {
  return std::string(pd.impl_info_str()).find("ref") != std::string::npos;
}

// One primitive with its arguments, ready to execute.
struct Exec {
  dnnl::primitive prim;
  std::unordered_map<int, memory> args;
  std::string what;  // "conv1 fwd: jit:avx2", for implementations()
};

// Batch-independent facts of one node (its kind's setup fills them).
struct NodeInfo {
  const Node* node = nullptr;
  // conv / fc
  memory::dims w_dims;  // {O, C, k, k}, {O, C, H, W} or {O, I}
  memory::dims strides, pad_l, pad_r, kernel;
  std::size_t w_off = 0, g_off = 0, b_off = 0, scale_off = 0, shift_off = 0;
  std::vector<float> w_eff, dw, norm;  // weight-norm scratch
  // batch norm: the statistics predict uses
  std::vector<float> mean, var;
};

// Where a node's backward puts dL/d(one of its inputs): `target`, then it
// is moved into the tensor's gradient `to`: nothing to do when target is
// that gradient; when the two have the same layout a memcpy, or `exec`, an
// in-place binary add (oneDNN's reorder of equal layouts is its slow
// generic one); else `exec`, a reorder (summing when the tensor already has
// a gradient).
struct GradTransfer {
  enum class Move { kNone, kCopy, kAdd, kReorder };
  memory target, to;
  Move move = Move::kNone;
  std::optional<Exec> exec;
};

struct NodePlan {
  // Forward.
  memory src;                       // conv / fc: input 0 in the primitive's layout
  std::optional<Exec> src_reorder;  // t[input 0] -> src
  memory src1;                      // add: input 1 in input 0's layout
  std::optional<Exec> src1_reorder;
  memory w_plain, w_fwd, bias;  // user-layout weights / primitive layout / bias
  std::optional<Exec> w_fwd_reorder;
  std::optional<Exec> fwd;
  memory workspace;                // max-pool indices, batch norm + ReLU mask
  memory mean, var;                // batch norm: the batch's / the set statistics
  memory scale, shift;             // batch norm: views of the parameters
  memory view4;                    // flatten: the output as a plain 4D tensor
  std::vector<std::uint8_t> mask;  // dropout: kept (1) or dropped (0), per element
  // dropout on a non-plain layout: per dimension, the address term of each
  // logical index (dim_offsets), padded to 4 dimensions
  std::vector<std::vector<std::int64_t>> mask_offsets;
  dnnl::convolution_forward::primitive_desc conv_pd;
  dnnl::inner_product_forward::primitive_desc ip_pd;
  dnnl::pooling_forward::primitive_desc pool_pd;
  dnnl::batch_normalization_forward::primitive_desc bn_pd;
  dnnl::eltwise_forward::primitive_desc eltwise_pd;
  // Backward.
  memory::desc bwd_w_src_md, bwd_w_diff_dst_md;  // conv: layouts of backward-weights
  memory w_bwd, dw, dw_plain, diff_bias, src_w, diff_dst_w, diff_scale, diff_shift;
  std::optional<Exec> w_bwd_reorder, src_w_reorder, diff_dst_w_reorder, bwd_weights, dw_reorder,
      bwd;
  std::optional<Exec> relu_bwd;          // a fused ReLU's mask, in place
  std::vector<GradTransfer> deliveries;  // per input slot that gets a gradient
};

struct Plan {
  int batch = 0;
  bool training = true;
  memory input;                       // the images (user memory)
  memory input_act;                   // the images in the compute's type, when it is not FP32
  std::optional<Exec> input_reorder;  // input -> input_act
  memory input_grad;                  // dL/dimages (user memory), when asked for
  std::vector<memory> t, d;           // per node: output and dL/doutput
  GradientPlan grads;                 // who writes, who adds, who shares (nn/walk.hpp)
  std::vector<NodePlan> nodes;
  memory logits, dlogits;  // plain [batch, outputs]
  std::optional<Exec> logits_reorder, dlogits_reorder;
  memory scratch;
  std::size_t scratch_nbytes = 0;
  std::vector<memory> buffers;  // inference: activation buffers shared by tensors
  bool has_backward = false, has_input_grad = false;
};

// What the kinds' functions share. Not thread-safe, like the network.
struct Context {
  Graph graph;
  // The activations' and their gradients' type: f32, or bf16 with
  // compute.precision = bf16 (weights converted per step, weight gradients
  // produced in FP32 by oneDNN's FP32 accumulation).
  Dt act = Dt::f32;
  std::vector<NodeInfo> infos;
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::uint64_t step_key = 0;  // the dropout key of this step
  // train_step_staged: told before each layer's forward and after each
  // layer's backward (null otherwise: predict, statistics, train_step).
  StepHooks* hooks = nullptr;
  float step_loss = 0.0f;

  template <class Pd>
  static void note_scratch(Plan& plan, const Pd& pd) {
    plan.scratch_nbytes = std::max(plan.scratch_nbytes, pd.scratchpad_desc().get_size());
  }
  // A reorder from -> to; with `sum`, to += from (accumulating a gradient).
  Exec make_reorder(Plan& plan, const memory& from, const memory& to, const std::string& what,
                    bool sum = false);
  // A user-layout memory whose data handle is set per call (params / grad /
  // images); no allocation.
  memory user_memory(const memory::desc& md) const { return memory(md, engine, nullptr); }
  // Node `id`'s output (kGraphInput: the images).
  const memory& tensor(const Plan& plan, int id) const;
  // The gradient of node `id`'s output (kGraphInput: dL/dimages).
  memory& grad_of(Plan& plan, int id);
  const Node& node(std::size_t j) const { return graph.nodes[j]; }

  // Backward planning. Node j's backward writes dL/d(its input `slot`) in
  // layout `natural`; the transfer that brings it into that tensor's
  // gradient, as the gradient plan says (write or add).
  GradTransfer plan_delivery(Plan& plan, std::size_t j, std::size_t slot,
                             const memory::desc& natural);
  // dL/d(input `slot`) of node j is `source` itself (an add, a flatten):
  // copied, or summed into an existing gradient.
  GradTransfer plan_pass_on(Plan& plan, std::size_t j, std::size_t slot, const memory& source);
  // Whether node j's input `slot` gets a gradient at all.
  bool wants_grad(const Plan& plan, std::size_t j, std::size_t slot) const {
    return plan.grads.into[j][slot] != Delivery::kNone;
  }

  // Execution.
  void run(Exec& e) { e.prim.execute(stream, e.args); }
  void run(std::optional<Exec>& e) {
    if (e) run(*e);
  }
  void deliver(GradTransfer& dl);

 private:
  void plan_move(Plan& plan, GradTransfer& dl, const memory& g, bool first,
                 const std::string& what);
};

// Activation buffers of one plan being built: in training each tensor gets
// its own (kept for the backward); at inference a tensor's buffer is given
// back once its last reader ran (nn::last_uses) and reused, best fit.
class Arena {
 public:
  Arena(Context& cx, Plan& plan) : m_cx(cx), m_plan(plan) {}
  memory take(const memory::desc& md);
  // The next node's output is tensor `of`'s buffer.
  void alias(std::size_t of) { m_owner.push_back(m_owner[of]); }
  void release(std::size_t tensor) {
    if (!m_plan.training) m_free.push_back(m_owner[tensor]);
  }

 private:
  Context& m_cx;
  Plan& m_plan;
  std::vector<std::size_t> m_free;
  std::vector<std::size_t> m_owner;  // per node: its buffer
};

}  // namespace syncopt::nn::cpu
