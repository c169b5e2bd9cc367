// Batch normalisation (docs/bn.md): training forward with the batch's own
// statistics, backward, and inference with the statistics set for the
// parameters evaluated (CpuNetwork::set_batch_norm_statistics). A fused ReLU
// is oneDNN's fuse_norm_relu flag, masked by the primitive's own workspace.
#include "nn/cpu/kinds.hpp"

namespace syncopt::nn::cpu::batch_norm {

namespace {

dnnl::normalization_flags flags_of(const Node& node, bool global_stats) {
  auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  if (node.relu) flags = flags | dnnl::normalization_flags::fuse_norm_relu;
  if (global_stats) flags = flags | dnnl::normalization_flags::use_global_stats;
  return flags;
}

void set_params(const NodeInfo& info, NodePlan& np, const float* params) {
  np.scale.set_data_handle(const_cast<float*>(params + info.scale_off));
  np.shift.set_data_handle(const_cast<float*>(params + info.shift_off));
}

}  // namespace

void setup(NodeInfo& info, const ParamLayout& layout) {
  const Node& node = *info.node;
  info.scale_off = layout.views[static_cast<std::size_t>(node.scale)].offset;
  info.shift_off = layout.views[static_cast<std::size_t>(node.shift)].offset;
  info.mean.assign(static_cast<std::size_t>(node.out[0]), 0.0f);
  info.var.assign(static_cast<std::size_t>(node.out[0]), 1.0f);
}

bool plan_forward(Context& cx, Plan& plan, std::size_t j, Arena& arena) {
  NodeInfo& info = cx.infos[j];
  const Node& node = *info.node;
  NodePlan& np = plan.nodes[j];
  const memory& in = cx.tensor(plan, node.inputs[0]);
  const auto kind =
      plan.training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
  np.bn_pd = dnnl::batch_normalization_forward::primitive_desc(
      cx.engine, kind, in.get_desc(), in.get_desc(), static_cast<float>(node.attr.eps),
      flags_of(node, !plan.training), make_attr(false));
  Context::note_scratch(plan, np.bn_pd);
  plan.t[j] = arena.take(np.bn_pd.dst_desc());
  np.scale = cx.user_memory(plain_desc({node.out[0]}));
  np.shift = cx.user_memory(plain_desc({node.out[0]}));
  if (plan.training) {
    np.mean = memory(np.bn_pd.mean_desc(), cx.engine);
    np.var = memory(np.bn_pd.variance_desc(), cx.engine);
  } else {
    np.mean = memory(plain_desc({node.out[0]}), cx.engine, info.mean.data());
    np.var = memory(plain_desc({node.out[0]}), cx.engine, info.var.data());
  }
  np.fwd = Exec{dnnl::batch_normalization_forward(np.bn_pd),
                {{DNNL_ARG_SRC, in},
                 {DNNL_ARG_DST, plan.t[j]},
                 {DNNL_ARG_SCALE, np.scale},
                 {DNNL_ARG_SHIFT, np.shift},
                 {DNNL_ARG_MEAN, np.mean},
                 {DNNL_ARG_VARIANCE, np.var}},
                node.name + " fwd: " + np.bn_pd.impl_info_str()};
  if (node.relu && plan.training) {
    np.workspace = memory(np.bn_pd.workspace_desc(), cx.engine);
    np.fwd->args[DNNL_ARG_WORKSPACE] = np.workspace;
  }
  return false;
}

void plan_backward(Context& cx, Plan& plan, std::size_t j) {
  const Node& node = cx.node(j);
  NodePlan& np = plan.nodes[j];
  const memory& in = cx.tensor(plan, node.inputs[0]);
  const dnnl::batch_normalization_backward::primitive_desc bpd(
      cx.engine, dnnl::prop_kind::backward, plan.d[j].get_desc(), plan.d[j].get_desc(),
      in.get_desc(), static_cast<float>(node.attr.eps), flags_of(node, false), np.bn_pd,
      make_attr(false));
  Context::note_scratch(plan, bpd);
  np.diff_scale = cx.user_memory(plain_desc({node.out[0]}));
  np.diff_shift = cx.user_memory(plain_desc({node.out[0]}));
  const bool need_data = cx.wants_grad(plan, j, 0);
  GradTransfer dl;
  if (need_data) {
    dl = cx.plan_delivery(plan, j, 0, bpd.diff_src_desc());
  } else {
    dl.target = memory(bpd.diff_src_desc(), cx.engine);  // computed anyway, unused
  }
  np.bwd = Exec{dnnl::batch_normalization_backward(bpd),
                {{DNNL_ARG_SRC, in},
                 {DNNL_ARG_MEAN, np.mean},
                 {DNNL_ARG_VARIANCE, np.var},
                 {DNNL_ARG_DIFF_DST, plan.d[j]},
                 {DNNL_ARG_SCALE, np.scale},

                 {DNNL_ARG_DIFF_SRC, dl.target},
                 {DNNL_ARG_DIFF_SCALE, np.diff_scale},
                 {DNNL_ARG_DIFF_SHIFT, np.diff_shift}},
                node.name + " bwd: " + bpd.impl_info_str()};
  if (node.relu) np.bwd->args[DNNL_ARG_WORKSPACE] = np.workspace;
  if (need_data) np.deliveries.push_back(std::move(dl));
}

void forward(Context& cx, Plan& plan, std::size_t j, const float* params, bool /*backward*/) {
  NodePlan& np = plan.nodes[j];
  set_params(cx.infos[j], np, params);
  cx.run(np.fwd);
}

void backward(Context& cx, Plan& plan, std::size_t j, const float* params, float* grad) {
  const NodeInfo& info = cx.infos[j];
  NodePlan& np = plan.nodes[j];
  set_params(info, np, params);
  np.diff_scale.set_data_handle(grad + info.scale_off);
  np.diff_shift.set_data_handle(grad + info.shift_off);
  cx.run(np.bwd);
}

}  // namespace syncopt::nn::cpu::batch_norm
