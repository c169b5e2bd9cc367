// ReLU as a layer of its own (one the graph could not fuse: its input is
// read elsewhere too), and the backward of a ReLU fused into the layer
// before it: dL/d(pre-ReLU) = dL/doutput where the output is > 0, by
// oneDNN's eltwise on the stored (post-ReLU) output.
#include "nn/cpu/kinds.hpp"

namespace syncopt::nn::cpu::relu {

namespace {

constexpr auto kAlgorithm = dnnl::algorithm::eltwise_relu_use_dst_for_bwd;

}  // namespace

bool plan_forward(Context& cx, Plan& plan, std::size_t j, Arena& arena) {
  return eltwise::plan_forward(cx, plan, j, arena, kAlgorithm);
}

void plan_backward(Context& cx, Plan& plan, std::size_t j) {
  eltwise::plan_backward(cx, plan, j, kAlgorithm, true);
}

void plan_fused_mask(Context& cx, Plan& plan, std::size_t j) {
  NodePlan& np = plan.nodes[j];
  const memory::desc& out = plan.t[j].get_desc();
  const dnnl::eltwise_forward::primitive_desc fpd(cx.engine, dnnl::prop_kind::forward_training,
                                                  kAlgorithm, out, out, 0.0f, 0.0f,
                                                  make_attr(false));
  const dnnl::eltwise_backward::primitive_desc bpd(cx.engine, kAlgorithm, plan.d[j].get_desc(),
                                                   plan.d[j].get_desc(), out, 0.0f, 0.0f, fpd,
                                                   make_attr(false));
  Context::note_scratch(plan, bpd);
  np.relu_bwd = Exec{
      dnnl::eltwise_backward(bpd),
      {{DNNL_ARG_DST, plan.t[j]}, {DNNL_ARG_DIFF_DST, plan.d[j]}, {DNNL_ARG_DIFF_SRC, plan.d[j]}},
      cx.node(j).name + " relu bwd: " + bpd.impl_info_str()};
}

}  // namespace syncopt::nn::cpu::relu
