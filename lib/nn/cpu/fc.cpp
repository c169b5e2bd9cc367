// Fully connected layers (oneDNN's inner product): forward, backward-weights
// and, when its input needs a gradient, backward-data. The weights'
// handling is weighted.cpp's.
#include "nn/cpu/kinds.hpp"

namespace syncopt::nn::cpu::fc {

namespace {

using Fwd = dnnl::inner_product_forward;
using BwdWeights = dnnl::inner_product_backward_weights;
using BwdData = dnnl::inner_product_backward_data;

// Picks the fc layouts. First choice: plain input and the user's plain
// [out, in] weights, so that no per-step weight / weight-gradient reorder
// exists (oneDNN's own blocked choice for the 800k-float fc1 weights costs
// two slow reorders per step; the plain input costs one small activation
// reorder instead). Then the input as it comes, then oneDNN's choice.
Fwd::primitive_desc choose(Context& cx, const NodeInfo& info, const memory::desc& in_md,
                           const memory::dims& in_dims, const memory::dims& out_dims,
                           const dnnl::primitive_attr& attr, bool need_data) {
  const memory::desc b_md = info.node->bias >= 0 ? plain_desc({info.node->units}) : memory::desc();
  auto make = [&](const memory::desc& src_md, const memory::desc& w_md) {
    const Fwd::desc d(dnnl::prop_kind::forward_training, src_md, w_md, b_md, any_desc(out_dims));
    return Fwd::primitive_desc(d, attr, cx.engine);
  };
  auto all_fast = [&](const Fwd::primitive_desc& fpd) {
    if (is_reference(fpd)) return false;
    const BwdWeights::desc wd(fpd.src_desc(), fpd.weights_desc(), b_md, fpd.dst_desc());
    if (is_reference(BwdWeights::primitive_desc(wd, cx.engine, fpd))) return false;
    if (!need_data) return true;
    const BwdData::desc dd(fpd.src_desc(), fpd.weights_desc(), fpd.dst_desc());
    return !is_reference(BwdData::primitive_desc(dd, cx.engine, fpd));
  };
  const std::pair<memory::desc, memory::desc> candidates[] = {
      {plain_desc(in_dims), plain_desc(info.w_dims)},
      {in_md, any_desc(info.w_dims)},
      {any_desc(in_dims), any_desc(info.w_dims)},
  };
  for (const auto& [src_md, w_md] : candidates) {
    try {
      auto pd = make(src_md, w_md);
      if (all_fast(pd)) return pd;
    } catch (const dnnl::error&) {
      // this combination is not implemented at all: try the next
    }
  }
  return make(any_desc(in_dims), any_desc(info.w_dims));
}

}  // namespace

bool plan_forward(Context& cx, Plan& plan, std::size_t j, Arena& arena) {
  const NodeInfo& info = cx.infos[j];
  const Node& node = *info.node;
  NodePlan& np = plan.nodes[j];
  const memory& in = cx.tensor(plan, node.inputs[0]);
  const bool need_data = node.inputs[0] != kGraphInput;
  np.ip_pd = choose(cx, info, in.get_desc(), with_batch(plan.batch, node.in),
                    with_batch(plan.batch, node.out), make_attr(node.relu), need_data);
  Context::note_scratch(plan, np.ip_pd);
  plan.t[j] = arena.take(np.ip_pd.dst_desc());
  weighted::plan_forward_weights(cx, plan, j, np.ip_pd.src_desc(), np.ip_pd.weights_desc());
  np.fwd = Exec{Fwd(np.ip_pd),
                {{DNNL_ARG_SRC, np.src}, {DNNL_ARG_WEIGHTS, np.w_fwd}, {DNNL_ARG_DST, plan.t[j]}},
                node.name + " fwd: " + np.ip_pd.impl_info_str()};
  if (node.bias >= 0) np.fwd->args[DNNL_ARG_BIAS] = np.bias;
  return false;
}

void plan_backward(Context& cx, Plan& plan, std::size_t j) {
  const dnnl::primitive_attr attr = make_attr(false);
  const Node& node = cx.node(j);
  NodePlan& np = plan.nodes[j];
  const std::string& name = node.name;
  const memory::desc b_md = node.bias >= 0 ? plain_desc({node.units}) : memory::desc();
  const auto& fpd = np.ip_pd;
  // Same weights layout as the forward (plain when choose could).
  const BwdWeights::desc wd(fpd.src_desc(), fpd.weights_desc(), b_md, fpd.dst_desc());
  const BwdWeights::primitive_desc wpd(wd, attr, cx.engine, fpd);
  Context::note_scratch(plan, wpd);
  weighted::plan_weight_grads(cx, plan, j, wpd.diff_weights_desc());
  np.bwd_weights =
      Exec{BwdWeights(wpd),
           {{DNNL_ARG_SRC, np.src}, {DNNL_ARG_DIFF_DST, plan.d[j]}, {DNNL_ARG_DIFF_WEIGHTS, np.dw}},
           name + " bwd weights: " + wpd.impl_info_str()};
  if (node.bias >= 0) np.bwd_weights->args[DNNL_ARG_DIFF_BIAS] = np.diff_bias;
  if (!cx.wants_grad(plan, j, 0)) return;
  const BwdData::desc dd(fpd.src_desc(), fpd.weights_desc(), fpd.dst_desc());
  const BwdData::primitive_desc dpd(dd, attr, cx.engine, fpd);
  Context::note_scratch(plan, dpd);
  weighted::plan_backward_weights(cx, plan, j, dpd.weights_desc());
  GradTransfer dl = cx.plan_delivery(plan, j, 0, np.src.get_desc());
  np.bwd = Exec{BwdData(dpd),
                {{DNNL_ARG_DIFF_DST, plan.d[j]},
                 {DNNL_ARG_WEIGHTS, np.w_bwd},
                 {DNNL_ARG_DIFF_SRC, dl.target}},
                name + " bwd data: " + dpd.impl_info_str()};
  np.deliveries.push_back(std::move(dl));
}

}  // namespace syncopt::nn::cpu::fc
