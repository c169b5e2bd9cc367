// The elementwise activations' shared plans (relu.cpp, gelu.cpp): oneDNN's
// eltwise forward of node j's input into a tensor of the same layout, and
// its backward, which reads either the output (ReLU: x > 0 iff y > 0) or the
// input (GELU).
#include "nn/cpu/kinds.hpp"

namespace syncopt::nn::cpu::eltwise {

bool plan_forward(Context& cx, Plan& plan, std::size_t j, Arena& arena, dnnl::algorithm alg) {
  const Node& node = cx.node(j);
  NodePlan& np = plan.nodes[j];
  const memory& in = cx.tensor(plan, node.inputs[0]);
  const auto kind =
      plan.training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  np.eltwise_pd = dnnl::eltwise_forward::primitive_desc(
      cx.engine, kind, alg, in.get_desc(), in.get_desc(), 0.0f, 0.0f, make_attr(false));
  Context::note_scratch(plan, np.eltwise_pd);
  plan.t[j] = arena.take(np.eltwise_pd.dst_desc());
  np.fwd = Exec{dnnl::eltwise_forward(np.eltwise_pd),
                {{DNNL_ARG_SRC, in}, {DNNL_ARG_DST, plan.t[j]}},
                node.name + " fwd: " + np.eltwise_pd.impl_info_str()};
  return false;
}

void plan_backward(Context& cx, Plan& plan, std::size_t j, dnnl::algorithm alg, bool from_dst) {
  if (!cx.wants_grad(plan, j, 0)) return;
  const Node& node = cx.node(j);
  NodePlan& np = plan.nodes[j];
  const memory& saved = from_dst ? plan.t[j] : cx.tensor(plan, node.inputs[0]);
  const dnnl::eltwise_backward::primitive_desc bpd(cx.engine, alg, plan.d[j].get_desc(),
                                                   plan.d[j].get_desc(), saved.get_desc(), 0.0f,
                                                   0.0f, np.eltwise_pd, make_attr(false));
  Context::note_scratch(plan, bpd);
  GradTransfer dl = cx.plan_delivery(plan, j, 0, bpd.diff_src_desc());
  np.bwd = Exec{dnnl::eltwise_backward(bpd),
                {{from_dst ? DNNL_ARG_DST : DNNL_ARG_SRC, saved},
                 {DNNL_ARG_DIFF_DST, plan.d[j]},
                 {DNNL_ARG_DIFF_SRC, dl.target}},
                node.name + " bwd: " + bpd.impl_info_str()};
  np.deliveries.push_back(std::move(dl));
}

}  // namespace syncopt::nn::cpu::eltwise
