// Convolution and fully connected layers, the parts they share: the
// weights' views, weight normalisation (w = g v / ||v||, kernels.cu), the
// weights converted to bf16 for the step (compute.precision = bf16; the FP32
// master copy stays where the update happens), the bias with the fused ReLU
// after the product, and the bias gradient (FP32, from the activations'
// type).
#include <algorithm>

#include "kinds.hpp"
#include "syncopt_cuda/kernels.hpp"

namespace syncopt::cuda::net::weighted {

void setup(NodeRt& r, Setup& s) {
  const nn::Node& node = *r.node;
  r.units = static_cast<int>(node.units);
  r.fan_in = static_cast<int>(node.fan_in);
  r.weight_norm = node.attr.weight_norm;
  r.has_bias = node.bias >= 0;
  r.w_off = s.view_offset(node.weight);
  const std::size_t wn = static_cast<std::size_t>(r.units) * r.fan_in;
  if (r.weight_norm) {
    r.g_off = s.view_offset(node.gain);
    r.w_eff = DeviceBuffer<float>(wn);
    r.dw = DeviceBuffer<float>(wn);
    r.norm = DeviceBuffer<float>(static_cast<std::size_t>(r.units));
  }
  if (s.numerics.bf16) {
    r.w16 = DeviceBuffer<__nv_bfloat16>(wn);
    if (node.type == LayerType::kConv) r.dw16 = DeviceBuffer<__nv_bfloat16>(wn);
  }
  if (r.has_bias) {
    r.b_off = s.view_offset(node.bias);
    s.bias_scratch =
        std::max(s.bias_scratch, bias_backward_scratch(s.max_batch, r.out.c, r.out.h * r.out.w));
  }
}

void forward_weights(const Pass& ps, NodeRt& r) {
  if (r.weight_norm) {
    weight_norm_forward(ps.P + r.w_off, ps.P + r.g_off, r.units, r.fan_in, r.w_eff.get(),
                        r.norm.get(), ps.stream);
  }
  if (ps.numerics.bf16) {
    const float* w = r.weight_norm ? r.w_eff.get() : ps.P + r.w_off;
    convert(w, r.w16.count(), r.w16.get(), ps.stream);
  }
}

void forward_bias_act(const Pass& ps, NodeRt& r, void* y, int hw) {
  if (!r.has_bias && !r.node->relu) return;
  with_type(ps.numerics, [&]<class T>() {
    bias_act_forward(static_cast<T*>(y), r.has_bias ? ps.P + r.b_off : nullptr, ps.batch, r.units,
                     hw, r.node->relu, ps.stream);
  });
}

void backward_bias(const Pass& ps, NodeRt& r, const void* dy) {
  if (!r.has_bias) return;
  with_type(ps.numerics, [&]<class T>() {
    bias_backward(static_cast<const T*>(dy), ps.batch, r.out.c, r.out.h * r.out.w, ps.G + r.b_off,
                  ps.bias_scratch, ps.stream);
  });
}

float* weight_grad(const Pass& ps, NodeRt& r) {
  return r.weight_norm ? r.dw.get() : ps.G + r.w_off;
}

void backward_weight_norm(const Pass& ps, NodeRt& r) {
  if (!r.weight_norm) return;
  weight_norm_backward(r.dw.get(), ps.P + r.w_off, ps.P + r.g_off, r.norm.get(), r.units, r.fan_in,
                       ps.G + r.w_off, ps.G + r.g_off, ps.stream);
}

}  // namespace syncopt::cuda::net::weighted
