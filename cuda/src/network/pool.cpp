// Max, average and global average pooling through cuDNN. Max: padding never
// wins (as oneDNN's); average: padding counts as zeros (oneDNN's
// pooling_avg_include_padding, PyTorch's default).
#include "kinds.hpp"
#include "syncopt_cuda/check.hpp"

namespace syncopt::cuda::net::pool {

void setup(NodeRt& r, Setup& /*s*/) {
  const nn::Node& node = *r.node;
  if (node.type == LayerType::kGlobalAvgPool) {
    SYNCOPT_CHECK_CUDNN(
        cudnnSetPooling2dDescriptor(r.pool.get(), CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING,
                                    CUDNN_NOT_PROPAGATE_NAN, r.in.h, r.in.w, 0, 0, r.in.h, r.in.w));
    return;
  }
  const nn::LayerDesc& a = node.attr;
  const int k = static_cast<int>(a.kernel), st = static_cast<int>(a.stride),
            p = static_cast<int>(a.pad);
  const cudnnPoolingMode_t mode = node.type == LayerType::kMaxPool
                                      ? CUDNN_POOLING_MAX_DETERMINISTIC
                                      : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
  SYNCOPT_CHECK_CUDNN(
      cudnnSetPooling2dDescriptor(r.pool.get(), mode, CUDNN_NOT_PROPAGATE_NAN, k, k, p, p, st, st));
}

void plan_forward(Planner& /*p*/, NodeRt& r, NodePlan& np) {
  int n = 0, c = 0, oh = 0, ow = 0;
  SYNCOPT_CHECK_CUDNN(
      cudnnGetPooling2dForwardOutputDim(r.pool.get(), np.x.get(), &n, &c, &oh, &ow));
  check_output(r, c, oh, ow);
}

void forward(const Pass& ps, NodeRt& r, NodePlan& np, std::size_t j) {
  SYNCOPT_CHECK_CUDNN(cudnnPoolingForward(ps.cudnn, r.pool.get(), &kOne, np.x.get(),
                                          ps.tensor(r.node->inputs[0]), &kZero, np.y.get(),
                                          ps.output(j)));
}

void backward(const Pass& ps, NodeRt& r, NodePlan& np, std::size_t j) {
  const nn::Node& node = *r.node;
  const Delivery d0 = ps.delivery(node, j, 0);
  if (d0 == Delivery::kNone) return;
  void* dx = ps.grad_of(node.inputs[0]);
  const float* beta = beta_of(d0);
  // Input positions in no window get no gradient: zero them first when this
  // contribution overwrites (then cuDNN adds to zeros).
  const nn::LayerDesc& a = node.attr;
  const bool covers_all =
      node.type == LayerType::kGlobalAvgPool ||
      (a.stride <= a.kernel && (r.in.h + 2 * a.pad - a.kernel) % a.stride == 0 &&
       (r.in.w + 2 * a.pad - a.kernel) % a.stride == 0);
  if (d0 == Delivery::kWrite && !covers_all) {
    SYNCOPT_CHECK_CUDA(cudaMemsetAsync(dx, 0, ps.nbytes(ps.in_count(r)), ps.stream));
    beta = &kOne;
  }
  SYNCOPT_CHECK_CUDNN(cudnnPoolingBackward(ps.cudnn, r.pool.get(), &kOne, np.y.get(), ps.output(j),
                                           np.y.get(), ps.doutput(j), np.x.get(),
                                           ps.tensor(node.inputs[0]), beta, np.x.get(), dx));
}

}  // namespace syncopt::cuda::net::pool
