// Dropout (kernels.cu): the CPU backend's masks (nn/dropout.hpp), drawn
// from the step's key at each element's logical NCHW position, recomputed in
// the backward; the identity (a copy) at inference.
#include "nn/dropout.hpp"

#include "kinds.hpp"
#include "syncopt_cuda/check.hpp"
#include "syncopt_cuda/kernels.hpp"

namespace syncopt::cuda::net::dropout {

void setup(NodeRt& r, Setup& /*s*/) {
  r.threshold = nn::dropout::threshold(r.node->attr.rate);
  r.keep_scale = static_cast<float>(1.0 / (1.0 - r.node->attr.rate));
}

void forward(const Pass& ps, NodeRt& r, NodePlan& /*np*/, std::size_t j) {
  if (!ps.training()) {
    SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(ps.output(j), ps.tensor(r.node->inputs[0]),
                                       ps.nbytes(ps.out_count(r)), cudaMemcpyDeviceToDevice,
                                       ps.stream));
    return;
  }
  with_type(ps.numerics, [&]<class T>() {
    ::syncopt::cuda::dropout_forward(ps.tensor<T>(r.node->inputs[0]), ps.out_count(r),
                                     nn::dropout::node_key(ps.step_key, j), r.threshold,
                                     r.keep_scale, ps.output<T>(j), ps.stream);
  });
}

void backward(const Pass& ps, NodeRt& r, NodePlan& /*np*/, std::size_t j) {
  const Delivery d0 = ps.delivery(*r.node, j, 0);
  if (d0 == Delivery::kNone) return;
  with_type(ps.numerics, [&]<class T>() {
    ::syncopt::cuda::dropout_backward(
        ps.doutput<const T>(j), ps.out_count(r), nn::dropout::node_key(ps.step_key, j), r.threshold,
        r.keep_scale, ps.grad_of<T>(r.node->inputs[0]), d0 == Delivery::kAccumulate, ps.stream);
  });
}

}  // namespace syncopt::cuda::net::dropout
