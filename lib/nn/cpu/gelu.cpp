// GELU, y = x Phi(x) with Phi the standard normal CDF (oneDNN's eltwise
// gelu_erf, the exact form; PyTorch's nn.GELU() default). Its backward
// needs the input (dy/dx = Phi(x) + x phi(x)), which the training plan
// keeps anyway.
#include "nn/cpu/kinds.hpp"

namespace syncopt::nn::cpu::gelu {

namespace {

constexpr auto kAlgorithm = dnnl::algorithm::eltwise_gelu_erf;

}  // namespace

bool plan_forward(Context& cx, Plan& plan, std::size_t j, Arena& arena) {
  const Node& node = cx.node(j);
  NodePlan& np = plan.nodes[j];
  const memory& in = cx.tensor(plan, node.inputs[0]);
  const auto kind =
      plan.training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  const dnnl::eltwise_forward::desc d(kind, kAlgorithm, in.get_desc(), 0.0f, 0.0f);
  np.eltwise_pd = dnnl::eltwise_forward::primitive_desc(d, make_attr(false), cx.engine);
  Context::note_scratch(plan, np.eltwise_pd);
  plan.t[j] = arena.take(np.eltwise_pd.dst_desc());
  np.fwd = Exec{dnnl::eltwise_forward(np.eltwise_pd),
                {{DNNL_ARG_SRC, in}, {DNNL_ARG_DST, plan.t[j]}},
                node.name + " fwd: " + np.eltwise_pd.impl_info_str()};
  return false;
}

void plan_backward(Context& cx, Plan& plan, std::size_t j) {
  if (!cx.wants_grad(plan, j, 0)) return;
  const Node& node = cx.node(j);
  NodePlan& np = plan.nodes[j];
  const memory& in = cx.tensor(plan, node.inputs[0]);
  const dnnl::eltwise_backward::desc bd(kAlgorithm, plan.d[j].get_desc(), in.get_desc(), 0.0f,
                                        0.0f);
  const dnnl::eltwise_backward::primitive_desc bpd(bd, make_attr(false), cx.engine, np.eltwise_pd);
  Context::note_scratch(plan, bpd);
  GradTransfer dl = cx.plan_delivery(plan, j, 0, bpd.diff_src_desc());
  np.bwd =
      Exec{dnnl::eltwise_backward(bpd),
           {{DNNL_ARG_SRC, in}, {DNNL_ARG_DIFF_DST, plan.d[j]}, {DNNL_ARG_DIFF_SRC, dl.target}},
           node.name + " bwd: " + bpd.impl_info_str()};
  np.deliveries.push_back(std::move(dl));
}

}  // namespace syncopt::nn::cpu::gelu
