// Fully connected layers (oneDNN's inner product): forward, backward-weights
// and, when its input needs a gradient, backward-data. The weights'
// handling is weighted.cpp's.
#include "nn/cpu/kinds.hpp"

namespace syncopt::nn::cpu::fc {

namespace {

using Fwd = dnnl::inner_product_forward;
using BwdWeights = dnnl::inner_product_backward_weights;
using BwdData = dnnl::inner_product_backward_data;

// The three primitive descs of node j's inner product (`info`), with its
// bias when it has one.
Fwd::primitive_desc forward_pd(const Context& cx, const NodeInfo& info, const memory::desc& src,
                               const memory::desc& w, const memory::desc& dst,
                               const dnnl::primitive_attr& attr) {
  if (info.node->bias < 0) {
    return Fwd::primitive_desc(cx.engine, dnnl::prop_kind::forward_training, src, w, dst, attr);
  }
  return Fwd::primitive_desc(cx.engine, dnnl::prop_kind::forward_training, src, w,
                             plain_desc({info.node->units}), dst, attr);
}

// Backward-weights with the forward's layouts (plain weights when choose
// could); in bf16 the weight gradient is FP32 in oneDNN's choice of layout.
BwdWeights::primitive_desc weights_pd(const Context& cx, const NodeInfo& info,
                                      const Fwd::primitive_desc& fpd,
                                      const dnnl::primitive_attr& attr) {
  const memory::desc dw = cx.act == Dt::f32 ? fpd.weights_desc() : any_desc(info.w_dims, Dt::f32);
  if (info.node->bias < 0) {
    return BwdWeights::primitive_desc(cx.engine, fpd.src_desc(), dw, fpd.dst_desc(), fpd, attr);
  }
  return BwdWeights::primitive_desc(cx.engine, fpd.src_desc(), dw, plain_desc({info.node->units}),
                                    fpd.dst_desc(), fpd, attr);
}

BwdData::primitive_desc data_pd(const Context& cx, const Fwd::primitive_desc& fpd,
                                const dnnl::primitive_attr& attr) {
  return BwdData::primitive_desc(cx.engine, fpd.src_desc(), fpd.weights_desc(), fpd.dst_desc(), fpd,
                                 attr);
}

// Picks the fc layouts. First choice: plain input and the user's plain
// [out, in] weights, so that no per-step weight / weight-gradient reorder
// exists (oneDNN's own blocked choice for the 800k-float fc1 weights costs
// two slow reorders per step; the plain input costs one small activation
// reorder instead). Then the input as it comes, then oneDNN's choice.
Fwd::primitive_desc choose(Context& cx, const NodeInfo& info, const memory::desc& in_md,
                           const memory::dims& in_dims, const memory::dims& out_dims,
                           const dnnl::primitive_attr& attr, bool need_data) {
  auto make = [&](const memory::desc& src_md, const memory::desc& w_md) {
    return forward_pd(cx, info, src_md, w_md, any_desc(out_dims, cx.act), attr);
  };
  auto all_fast = [&](const Fwd::primitive_desc& fpd) {
    if (is_reference(fpd)) return false;
    if (is_reference(weights_pd(cx, info, fpd, make_attr(false)))) return false;
    return !need_data || !is_reference(data_pd(cx, fpd, make_attr(false)));
  };
  const Dt act = cx.act;
  const std::pair<memory::desc, memory::desc> candidates[] = {
      {plain_desc(in_dims, act), plain_desc(info.w_dims, act)},
      {in_md, any_desc(info.w_dims, act)},
      {any_desc(in_dims, act), any_desc(info.w_dims, act)},
  };
  for (const auto& [src_md, w_md] : candidates) {
    try {
      auto pd = make(src_md, w_md);
      if (all_fast(pd)) return pd;
    } catch (const dnnl::error&) {
      // this combination is not implemented at all: try the next
    }
  }
  return make(any_desc(in_dims, act), any_desc(info.w_dims, act));
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
  const auto& fpd = np.ip_pd;
  const BwdWeights::primitive_desc wpd = weights_pd(cx, cx.infos[j], fpd, attr);
  Context::note_scratch(plan, wpd);
  weighted::plan_weight_grads(cx, plan, j, wpd.diff_weights_desc());
  np.bwd_weights =
      Exec{BwdWeights(wpd),
           {{DNNL_ARG_SRC, np.src}, {DNNL_ARG_DIFF_DST, plan.d[j]}, {DNNL_ARG_DIFF_WEIGHTS, np.dw}},
           name + " bwd weights: " + wpd.impl_info_str()};
  if (node.bias >= 0) np.bwd_weights->args[DNNL_ARG_DIFF_BIAS] = np.diff_bias;
  if (!cx.wants_grad(plan, j, 0)) return;
  const BwdData::primitive_desc dpd = data_pd(cx, fpd, attr);
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
