// Batch normalisation through cuDNN (spatial mode; docs/bn.md), on FP32 or
// bf16 tensors with FP32 scale, shift and statistics: training
// normalises with the batch's own statistics and keeps no running ones;
// the statistics pass also sums each batch's mean and variance (kernels.cu,
// the CPU backend's precise statistics); inference uses the set ones. A
// fused ReLU runs on the output in place (its backward is the walk's mask).
#include "kinds.hpp"
#include "syncopt_cuda/check.hpp"
#include "syncopt_cuda/kernels.hpp"

namespace syncopt::cuda::net::batch_norm {

void setup(NodeRt& r, Setup& s) {
  const nn::Node& node = *r.node;
  r.scale_off = s.view_offset(node.scale);
  r.shift_off = s.view_offset(node.shift);
  const std::size_t c = static_cast<std::size_t>(r.out.c);
  SYNCOPT_CHECK_CUDNN(cudnnSetTensor4dDescriptor(r.bn_param.get(), CUDNN_TENSOR_NCHW,
                                                 CUDNN_DATA_FLOAT, 1, r.out.c, 1, 1));
  r.save_mean = DeviceBuffer<float>(c);
  r.save_inv_var = DeviceBuffer<float>(c);
  r.pop_mean = DeviceBuffer<float>(c);
  r.pop_var = DeviceBuffer<float>(c);
  r.stats_sums = DeviceBuffer<double>(2 * c);
}

void forward(const Pass& ps, NodeRt& r, NodePlan& np, std::size_t j) {
  const nn::Node& node = *r.node;
  const void* x = ps.tensor(node.inputs[0]);
  void* y = ps.output(j);
  if (ps.training()) {
    // Batch statistics; no running averages (null), the batch's mean and
    // inverse deviation saved for the backward.
    SYNCOPT_CHECK_CUDNN(cudnnBatchNormalizationForwardTraining(
        ps.cudnn, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, np.x.get(), x, np.y.get(), y,
        r.bn_param.get(), ps.P + r.scale_off, ps.P + r.shift_off, 1.0, nullptr, nullptr,
        node.attr.eps, r.save_mean.get(), r.save_inv_var.get()));
    if (ps.mode == Mode::kStatistics) {
      with_type(ps.numerics, [&]<class T>() {
        bn_batch_statistics(static_cast<const T*>(x), ps.batch, r.in.c, r.in.h * r.in.w,
                            r.stats_sums.get(), ps.stream);
      });
    }
  } else {
    SYNCOPT_CHECK_CUDNN(cudnnBatchNormalizationForwardInference(
        ps.cudnn, CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, np.x.get(), x, np.y.get(), y,
        r.bn_param.get(), ps.P + r.scale_off, ps.P + r.shift_off, r.pop_mean.get(), r.pop_var.get(),
        node.attr.eps));
  }
  if (!node.relu) return;
  with_type(ps.numerics, [&]<class T>() {
    bias_act_forward(static_cast<T*>(y), nullptr, ps.batch, r.out.c, r.out.h * r.out.w, true,
                     ps.stream);
  });
}

void backward(const Pass& ps, NodeRt& r, NodePlan& np, std::size_t j) {
  const nn::Node& node = *r.node;
  const Delivery d0 = ps.delivery(node, j, 0);
  // dL/dx is computed in any case: into the scratch when unwanted (a batch
  // norm on the images).
  SYNCOPT_CHECK_CUDNN(cudnnBatchNormalizationBackward(
      ps.cudnn, CUDNN_BATCHNORM_SPATIAL, &kOne, beta_of(d0), &kOne, &kZero, np.x.get(),
      ps.tensor(node.inputs[0]), np.y.get(), ps.doutput(j), np.x.get(),
      d0 == Delivery::kNone ? ps.scratch : ps.grad_of(node.inputs[0]), r.bn_param.get(),
      ps.P + r.scale_off, ps.G + r.scale_off, ps.G + r.shift_off, node.attr.eps, r.save_mean.get(),
      r.save_inv_var.get()));
}

}  // namespace syncopt::cuda::net::batch_norm
