// Convolution and fully connected layers, the parts they share: weights in
// the user's flat buffer in plain OIHW / [out, in], per call the effective
// weights computed once (weight norm, nn/ops.hpp) and reordered once to each
// primitive's preferred layout; the bias; the weight gradient reordered back
// into the plain layout and through the weight norm's backward.
#include "common/error.hpp"
#include "nn/cpu/kinds.hpp"
#include "nn/ops.hpp"

namespace syncopt::nn::cpu::weighted {

void setup(NodeInfo& info, const ParamLayout& layout) {
  const Node& node = *info.node;
  const LayerDesc& a = node.attr;
  info.w_dims = {node.units};
  if (node.type == LayerType::kConv) {
    info.w_dims.insert(info.w_dims.end(), {node.in[0], a.kernel, a.kernel});
    info.strides = {a.stride, a.stride};
    // Symmetric padding, output sizes rounded down (as PyTorch): oneDNN
    // rounds (in + pad_l + pad_r - kernel) / stride down too.
    info.pad_l = {a.pad, a.pad};
    info.pad_r = {a.pad, a.pad};
  } else {
    info.w_dims.insert(info.w_dims.end(), node.in.begin(), node.in.end());
  }
  info.w_off = layout.views[static_cast<std::size_t>(node.weight)].offset;
  if (a.weight_norm) {
    info.g_off = layout.views[static_cast<std::size_t>(node.gain)].offset;
    const auto wn = static_cast<std::size_t>(node.units * node.fan_in);
    info.w_eff.resize(wn);
    info.dw.resize(wn);
    info.norm.resize(static_cast<std::size_t>(node.units));
  }
  if (node.bias >= 0) info.b_off = layout.views[static_cast<std::size_t>(node.bias)].offset;
}

void plan_forward_weights(Context& cx, Plan& plan, std::size_t j, const memory::desc& src_md,
                          const memory::desc& w_md) {
  NodePlan& np = plan.nodes[j];
  const NodeInfo& info = cx.infos[j];
  const memory& in = cx.tensor(plan, info.node->inputs[0]);
  const std::string& name = info.node->name;
  if (src_md == in.get_desc()) {
    np.src = in;
  } else {
    np.src = memory(src_md, cx.engine);
    np.src_reorder = cx.make_reorder(plan, in, np.src, name + " input reorder");
  }
  np.w_plain = cx.user_memory(plain_desc(info.w_dims));
  np.bias = cx.user_memory(plain_desc({info.node->units}));
  if (w_md == np.w_plain.get_desc()) {
    np.w_fwd = np.w_plain;
  } else {
    np.w_fwd = memory(w_md, cx.engine);
    np.w_fwd_reorder = cx.make_reorder(plan, np.w_plain, np.w_fwd, name + " weights reorder");
  }
}

void plan_weight_grads(Context& cx, Plan& plan, std::size_t j, const memory::desc& dw_md) {
  NodePlan& np = plan.nodes[j];
  const NodeInfo& info = cx.infos[j];
  np.dw_plain = cx.user_memory(plain_desc(info.w_dims));
  np.diff_bias = cx.user_memory(plain_desc({info.node->units}));
  if (dw_md == np.dw_plain.get_desc()) {
    np.dw = np.dw_plain;
  } else {
    np.dw = memory(dw_md, cx.engine);
    np.dw_reorder =
        cx.make_reorder(plan, np.dw, np.dw_plain, info.node->name + " dweights reorder");
  }
}

void plan_backward_weights(Context& cx, Plan& plan, std::size_t j, const memory::desc& w_md) {
  NodePlan& np = plan.nodes[j];
  if (w_md == np.w_fwd.get_desc()) {
    np.w_bwd = np.w_fwd;
  } else if (w_md == np.w_plain.get_desc()) {
    np.w_bwd = np.w_plain;
  } else {
    np.w_bwd = memory(w_md, cx.engine);
    np.w_bwd_reorder =
        cx.make_reorder(plan, np.w_plain, np.w_bwd, cx.node(j).name + " bwd weights reorder");
  }
}

void forward(Context& cx, Plan& plan, std::size_t j, const float* params, bool backward) {
  NodeInfo& info = cx.infos[j];
  const Node& node = *info.node;
  NodePlan& np = plan.nodes[j];
  if (node.attr.weight_norm) {
    ops::weight_norm_forward(params + info.w_off, params + info.g_off, node.units, node.fan_in,
                             info.w_eff.data(), info.norm.data());
    np.w_plain.set_data_handle(info.w_eff.data());
  } else {
    np.w_plain.set_data_handle(const_cast<float*>(params + info.w_off));
  }
  if (node.bias >= 0) np.bias.set_data_handle(const_cast<float*>(params + info.b_off));
  cx.run(np.w_fwd_reorder);
  if (backward) cx.run(np.w_bwd_reorder);
  cx.run(np.src_reorder);
  cx.run(np.fwd);
}

void backward(Context& cx, Plan& plan, std::size_t j, const float* params, float* grad) {
  NodeInfo& info = cx.infos[j];
  const Node& node = *info.node;
  NodePlan& np = plan.nodes[j];
  np.dw_plain.set_data_handle(node.attr.weight_norm ? info.dw.data() : grad + info.w_off);
  if (node.bias >= 0) np.diff_bias.set_data_handle(grad + info.b_off);
  cx.run(np.src_w_reorder);
  cx.run(np.diff_dst_w_reorder);
  cx.run(np.bwd_weights);
  cx.run(np.dw_reorder);
  if (node.attr.weight_norm) {
    cx.stream.wait();
    ops::weight_norm_backward(info.dw.data(), params + info.w_off, params + info.g_off,
                              info.norm.data(), node.units, node.fan_in, grad + info.w_off,
                              grad + info.g_off);
  }
  cx.run(np.bwd);
}

}  // namespace syncopt::nn::cpu::weighted
