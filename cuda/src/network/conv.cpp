// Convolution through cuDNN (any kernel, stride, padding; forward,
// backward-data, backward-filter); the algorithms chosen once per batch size
// (algorithms.cpp). FP32 in FMA math (no TF32, unless compute.tf32), or bf16
// tensors with FP32 accumulation on tensor cores: the weight gradient then
// comes out of cuDNN in bf16 (r.dw16) and is widened into the FP32 gradient.
#include "kinds.hpp"
#include "syncopt_cuda/check.hpp"
#include "syncopt_cuda/kernels.hpp"

namespace syncopt::cuda::net::conv {

void setup(NodeRt& r, Setup& s) {
  weighted::setup(r, s);
  const nn::LayerDesc& a = r.node->attr;
  const int k = static_cast<int>(a.kernel), st = static_cast<int>(a.stride),
            p = static_cast<int>(a.pad);
  SYNCOPT_CHECK_CUDNN(cudnnSetFilter4dDescriptor(r.filter.get(), s.numerics.data(),
                                                 CUDNN_TENSOR_NCHW, r.units, r.in.c, k, k));
  // FP32 accumulation in either precision.
  SYNCOPT_CHECK_CUDNN(cudnnSetConvolution2dDescriptor(r.conv.get(), p, p, st, st, 1, 1,
                                                      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  SYNCOPT_CHECK_CUDNN(cudnnSetConvolutionMathType(r.conv.get(), s.numerics.conv_math()));
}

void plan_forward(Planner& p, NodeRt& r, NodePlan& np) {
  int n = 0, c = 0, oh = 0, ow = 0;
  SYNCOPT_CHECK_CUDNN(cudnnGetConvolution2dForwardOutputDim(r.conv.get(), np.x.get(),
                                                            r.filter.get(), &n, &c, &oh, &ow));
  check_output(r, c, oh, ow);
  choose_forward_algorithm(p, r, np);
}

void plan_backward(Planner& p, NodeRt& r, NodePlan& np) { choose_backward_algorithms(p, r, np); }

void forward(const Pass& ps, NodeRt& r, NodePlan& np, std::size_t j) {
  weighted::forward_weights(ps, r);
  void* y = ps.output(j);
  SYNCOPT_CHECK_CUDNN(cudnnConvolutionForward(
      ps.cudnn, &kOne, np.x.get(), ps.tensor(r.node->inputs[0]), r.filter.get(), ps.weights(r),
      r.conv.get(), np.fwd_algo, ps.workspace, ps.workspace_nbytes, &kZero, np.y.get(), y));
  weighted::forward_bias_act(ps, r, y, r.out.h * r.out.w);
}

void backward(const Pass& ps, NodeRt& r, NodePlan& np, std::size_t j) {
  const nn::Node& node = *r.node;
  const void* dy = ps.doutput(j);
  weighted::backward_bias(ps, r, dy);
  float* dw = weighted::weight_grad(ps, r);
  void* dw_out = ps.numerics.bf16 ? static_cast<void*>(r.dw16.get()) : dw;
  SYNCOPT_CHECK_CUDNN(cudnnConvolutionBackwardFilter(
      ps.cudnn, &kOne, np.x.get(), ps.tensor(node.inputs[0]), np.y.get(), dy, r.conv.get(),
      np.bwd_filter_algo, ps.workspace, ps.workspace_nbytes, &kZero, r.filter.get(), dw_out));
  if (ps.numerics.bf16) convert(r.dw16.get(), r.dw16.count(), dw, ps.stream);
  weighted::backward_weight_norm(ps, r);
  const Delivery d0 = ps.delivery(node, j, 0);
  if (d0 == Delivery::kNone) return;
  SYNCOPT_CHECK_CUDNN(cudnnConvolutionBackwardData(ps.cudnn, &kOne, r.filter.get(), ps.weights(r),
                                                   np.y.get(), dy, r.conv.get(), np.bwd_data_algo,
                                                   ps.workspace, ps.workspace_nbytes, beta_of(d0),
                                                   np.x.get(), ps.grad_of(node.inputs[0])));
}

}  // namespace syncopt::cuda::net::conv
