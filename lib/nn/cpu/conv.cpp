// Convolution (oneDNN's direct convolution): forward, backward-weights and,
// when its input needs a gradient, backward-data. Layouts: the input as it
// comes and oneDNN's choice (format_tag::any) for the output, unless that
// or the backward it implies has only a reference implementation (below).
// The weights' handling is weighted.cpp's.
#include <tuple>

#include "nn/cpu/kinds.hpp"

namespace syncopt::nn::cpu::conv {

namespace {

using Fwd = dnnl::convolution_forward;
using BwdWeights = dnnl::convolution_backward_weights;
using BwdData = dnnl::convolution_backward_data;
constexpr auto kDirect = dnnl::algorithm::convolution_direct;

// The three primitive descs of node j's convolution (`info`), with its bias
// when it has one (a bias's gradient is backward-weights' too).
Fwd::primitive_desc forward_pd(const Context& cx, const NodeInfo& info, const memory::desc& src,
                               const memory::desc& w, const memory::desc& dst,
                               const dnnl::primitive_attr& attr) {
  if (info.node->bias < 0) {
    return Fwd::primitive_desc(cx.engine, dnnl::prop_kind::forward_training, kDirect, src, w, dst,
                               info.strides, info.pad_l, info.pad_r, attr);
  }
  return Fwd::primitive_desc(cx.engine, dnnl::prop_kind::forward_training, kDirect, src, w,
                             plain_desc({info.node->units}), dst, info.strides, info.pad_l,
                             info.pad_r, attr);
}

BwdWeights::primitive_desc weights_pd(const Context& cx, const NodeInfo& info,
                                      const memory::desc& src, const memory::desc& dw,
                                      const memory::desc& diff_dst, const Fwd::primitive_desc& fpd,
                                      const dnnl::primitive_attr& attr) {
  if (info.node->bias < 0) {
    return BwdWeights::primitive_desc(cx.engine, kDirect, src, dw, diff_dst, info.strides,
                                      info.pad_l, info.pad_r, fpd, attr);
  }
  return BwdWeights::primitive_desc(cx.engine, kDirect, src, dw, plain_desc({info.node->units}),
                                    diff_dst, info.strides, info.pad_l, info.pad_r, fpd, attr);
}

BwdData::primitive_desc data_pd(const Context& cx, const NodeInfo& info,
                                const Fwd::primitive_desc& fpd, const dnnl::primitive_attr& attr) {
  return BwdData::primitive_desc(cx.engine, kDirect, fpd.src_desc(), any_desc(info.w_dims, cx.act),
                                 fpd.dst_desc(), info.strides, info.pad_l, info.pad_r, fpd, attr);
}

// Picks the conv layouts (forward primitive desc and the diff_dst layout
// and src of backward-weights): the input as it comes and oneDNN's choice
// (format_tag::any) for the output, or for both, unless that, or the
// backward it implies, has only a reference implementation. That is the
// case of the first conv of a 1- or 3-channel NCHW input on AVX2: there the
// blocked forward exists but its blocked-diff_dst backward-weights does
// not; the NHWC one does, so backward-weights gets its own reorders of src
// and diff_dst (cheaper than running the following max-pool on NHWC, which
// is 1.5x slower than on nChw8c).
class Chooser {
 public:
  Chooser(Context& cx, const NodeInfo& info, const memory::dims& in_dims,
          const memory::dims& out_dims, const dnnl::primitive_attr& attr, bool need_data)
      : m_cx(cx),
        m_info(info),
        m_attr(attr),
        m_need_data(need_data),
        m_w_any(any_desc(info.w_dims, cx.act)),
        m_dw_any(any_desc(info.w_dims)),
        m_in_dims(in_dims),
        m_out_dims(out_dims) {}

  std::tuple<Fwd::primitive_desc, memory::desc, memory::desc> choose(const memory::desc& in_md) {
    const Dt act = m_cx.act;
    const memory::desc nhwc_in(m_in_dims, act, Tag::nhwc);
    const memory::desc nhwc_out(m_out_dims, act, Tag::nhwc);
    // In bf16 oneDNN's own choice of both layouts comes first: its AMX and
    // AVX512-BF16 kernels (brgconv) want channels-last, and a blocked input
    // kept from the layer before sends it to a slower kernel.
    const bool own_first = act != Dt::f32;
    const memory::desc first_src = own_first ? any_desc(m_in_dims, act) : in_md;
    const memory::desc second_src = own_first ? in_md : any_desc(m_in_dims, act);
    const std::pair<memory::desc, memory::desc> candidates[] = {
        {first_src, any_desc(m_out_dims, act)},
        {second_src, any_desc(m_out_dims, act)},
        {in_md, nhwc_out},
        {nhwc_in, nhwc_out},
        {in_md, plain_desc(m_out_dims, act)},
    };
    for (const auto& [src_md, dst_md] : candidates) {
      try {
        auto pd = make(src_md, dst_md);
        if (is_reference(pd) || !fast_data(pd)) continue;
        if (fast_weights(pd, pd.src_desc(), pd.dst_desc())) {
          return {pd, pd.src_desc(), pd.dst_desc()};
        }
        if (fast_weights(pd, pd.src_desc(), nhwc_out)) return {pd, pd.src_desc(), nhwc_out};
        if (fast_weights(pd, nhwc_in, nhwc_out)) return {pd, nhwc_in, nhwc_out};
      } catch (const dnnl::error&) {
        // this combination is not implemented at all: try the next
      }
    }
    auto pd = make(any_desc(m_in_dims, act), any_desc(m_out_dims, act));
    return {pd, pd.src_desc(), pd.dst_desc()};
  }

 private:
  Fwd::primitive_desc make(const memory::desc& src_md, const memory::desc& dst_md) const {
    return forward_pd(m_cx, m_info, src_md, m_w_any, dst_md, m_attr);
  }
  bool fast_weights(const Fwd::primitive_desc& fpd, const memory::desc& src_md,
                    const memory::desc& diff_dst_md) const {
    return !is_reference(
        weights_pd(m_cx, m_info, src_md, m_dw_any, diff_dst_md, fpd, make_attr(false)));
  }
  bool fast_data(const Fwd::primitive_desc& fpd) const {
    return !m_need_data || !is_reference(data_pd(m_cx, m_info, fpd, make_attr(false)));
  }

  Context& m_cx;
  const NodeInfo& m_info;
  const dnnl::primitive_attr& m_attr;
  bool m_need_data;
  memory::desc m_w_any, m_dw_any;  // the weights in the compute's type; their gradient in FP32
  memory::dims m_in_dims, m_out_dims;
};

}  // namespace

bool plan_forward(Context& cx, Plan& plan, std::size_t j, Arena& arena) {
  const NodeInfo& info = cx.infos[j];
  const Node& node = *info.node;
  NodePlan& np = plan.nodes[j];
  const memory& in = cx.tensor(plan, node.inputs[0]);
  const dnnl::primitive_attr attr = make_attr(node.relu);
  // Backward-data runs unless the input is the images (and no dL/dimages
  // is asked for); a forward pass alone plans as if it ran.
  const bool need_data = node.inputs[0] != kGraphInput;
  Chooser chooser(cx, info, with_batch(plan.batch, node.in), with_batch(plan.batch, node.out), attr,
                  need_data);
  std::tie(np.conv_pd, np.bwd_w_src_md, np.bwd_w_diff_dst_md) = chooser.choose(in.get_desc());
  Context::note_scratch(plan, np.conv_pd);
  plan.t[j] = arena.take(np.conv_pd.dst_desc());
  weighted::plan_forward_weights(cx, plan, j, np.conv_pd.src_desc(), np.conv_pd.weights_desc());
  np.fwd = Exec{Fwd(np.conv_pd),
                {{DNNL_ARG_SRC, np.src}, {DNNL_ARG_WEIGHTS, np.w_fwd}, {DNNL_ARG_DST, plan.t[j]}},
                node.name + " fwd: " + np.conv_pd.impl_info_str()};
  if (node.bias >= 0) np.fwd->args[DNNL_ARG_BIAS] = np.bias;
  return false;
}

void plan_backward(Context& cx, Plan& plan, std::size_t j) {
  const dnnl::primitive_attr attr = make_attr(false);
  const NodeInfo& info = cx.infos[j];
  const Node& node = *info.node;
  NodePlan& np = plan.nodes[j];
  const std::string& name = node.name;
  const auto& fpd = np.conv_pd;
  const BwdWeights::primitive_desc wpd =
      weights_pd(cx, info, np.bwd_w_src_md, any_desc(info.w_dims), np.bwd_w_diff_dst_md, fpd, attr);
  Context::note_scratch(plan, wpd);
  weighted::plan_weight_grads(cx, plan, j, wpd.diff_weights_desc());
  np.src_w = np.src;
  if (wpd.src_desc() != np.src.get_desc()) {
    np.src_w = memory(wpd.src_desc(), cx.engine);
    np.src_w_reorder = cx.make_reorder(plan, np.src, np.src_w, name + " input reorder (bwd)");
  }
  np.diff_dst_w = plan.d[j];
  if (wpd.diff_dst_desc() != plan.d[j].get_desc()) {
    np.diff_dst_w = memory(wpd.diff_dst_desc(), cx.engine);
    np.diff_dst_w_reorder =
        cx.make_reorder(plan, plan.d[j], np.diff_dst_w, name + " doutput reorder");
  }
  np.bwd_weights = Exec{BwdWeights(wpd),
                        {{DNNL_ARG_SRC, np.src_w},
                         {DNNL_ARG_DIFF_DST, np.diff_dst_w},
                         {DNNL_ARG_DIFF_WEIGHTS, np.dw}},
                        name + " bwd weights: " + wpd.impl_info_str()};
  if (node.bias >= 0) np.bwd_weights->args[DNNL_ARG_DIFF_BIAS] = np.diff_bias;
  if (!cx.wants_grad(plan, j, 0)) return;
  const BwdData::primitive_desc dpd = data_pd(cx, info, fpd, attr);
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

}  // namespace syncopt::nn::cpu::conv
