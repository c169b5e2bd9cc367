// Max, average (padding counts as zeros, PyTorch's default) and global
// average pooling: one oneDNN pooling primitive, forward and backward; a
// max-pool keeps its argmax workspace for the backward.
#include "nn/cpu/kinds.hpp"

namespace syncopt::nn::cpu::pool {

namespace {

const memory::dims kNoDilation = {0, 0};

dnnl::algorithm algorithm_of(const Node& n) {
  return n.type == LayerType::kMaxPool ? dnnl::algorithm::pooling_max
                                       : dnnl::algorithm::pooling_avg_include_padding;
}

}  // namespace

void setup(NodeInfo& info, const ParamLayout& /*layout*/) {
  const Node& node = *info.node;
  const LayerDesc& a = node.attr;
  if (node.type == LayerType::kGlobalAvgPool) {
    info.kernel = {node.in[1], node.in[2]};
    info.strides = {node.in[1], node.in[2]};
    info.pad_l = {0, 0};
    info.pad_r = {0, 0};
    return;
  }
  info.kernel = {a.kernel, a.kernel};
  info.strides = {a.stride, a.stride};
  info.pad_l = {a.pad, a.pad};
  info.pad_r = {a.pad, a.pad};
}

bool plan_forward(Context& cx, Plan& plan, std::size_t j, Arena& arena) {
  const NodeInfo& info = cx.infos[j];
  const Node& node = *info.node;
  NodePlan& np = plan.nodes[j];
  const memory& in = cx.tensor(plan, node.inputs[0]);
  const auto kind =
      plan.training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  np.pool_pd = dnnl::pooling_forward::primitive_desc(
      cx.engine, kind, algorithm_of(node), in.get_desc(),
      any_desc(with_batch(plan.batch, node.out), cx.act), info.strides, info.kernel, kNoDilation,
      info.pad_l, info.pad_r, make_attr(node.relu));
  Context::note_scratch(plan, np.pool_pd);
  plan.t[j] = arena.take(np.pool_pd.dst_desc());
  np.fwd = Exec{dnnl::pooling_forward(np.pool_pd),
                {{DNNL_ARG_SRC, in}, {DNNL_ARG_DST, plan.t[j]}},
                node.name + " fwd: " + np.pool_pd.impl_info_str()};
  if (node.type == LayerType::kMaxPool && plan.training) {
    np.workspace = memory(np.pool_pd.workspace_desc(), cx.engine);
    np.fwd->args[DNNL_ARG_WORKSPACE] = np.workspace;
  }
  return false;
}

void plan_backward(Context& cx, Plan& plan, std::size_t j) {
  if (!cx.wants_grad(plan, j, 0)) return;
  const NodeInfo& info = cx.infos[j];
  const Node& node = *info.node;
  NodePlan& np = plan.nodes[j];
  const memory& in = cx.tensor(plan, node.inputs[0]);
  const dnnl::pooling_backward::primitive_desc bpd(
      cx.engine, algorithm_of(node), in.get_desc(), np.pool_pd.dst_desc(), info.strides,
      info.kernel, kNoDilation, info.pad_l, info.pad_r, np.pool_pd, make_attr(false));
  Context::note_scratch(plan, bpd);
  GradTransfer dl = cx.plan_delivery(plan, j, 0, bpd.diff_src_desc());
  np.bwd = Exec{dnnl::pooling_backward(bpd),
                {{DNNL_ARG_DIFF_DST, plan.d[j]}, {DNNL_ARG_DIFF_SRC, dl.target}},
                node.name + " bwd: " + bpd.impl_info_str()};
  if (node.type == LayerType::kMaxPool) np.bwd->args[DNNL_ARG_WORKSPACE] = np.workspace;
  np.deliveries.push_back(std::move(dl));
}

}  // namespace syncopt::nn::cpu::pool
