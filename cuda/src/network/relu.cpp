// ReLU as a layer of its own (kernels.cu): the input copied and rectified in
// place; its backward masks dL/doutput with the stored output.
#include "kinds.hpp"
#include "syncopt_cuda/check.hpp"
#include "syncopt_cuda/kernels.hpp"

namespace syncopt::cuda::net::relu {

void forward(const Pass& ps, NodeRt& r, NodePlan& /*np*/, std::size_t j) {
  void* y = ps.output(j);
  SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(y, ps.tensor(r.node->inputs[0]), ps.nbytes(ps.in_count(r)),
                                     cudaMemcpyDeviceToDevice, ps.stream));
  with_type(ps.numerics, [&]<class T>() {
    bias_act_forward(static_cast<T*>(y), nullptr, ps.batch, r.out.c, r.out.h * r.out.w, true,
                     ps.stream);
  });
}

void backward(const Pass& ps, NodeRt& r, NodePlan& /*np*/, std::size_t j) {
  const Delivery d0 = ps.delivery(*r.node, j, 0);
  if (d0 == Delivery::kNone) return;
  with_type(ps.numerics, [&]<class T>() {
    relu_backward(ps.output<const T>(j), ps.doutput<const T>(j), ps.out_count(r),
                  ps.grad_of<T>(r.node->inputs[0]), ps.stream, d0 == Delivery::kAccumulate);
  });
}

}  // namespace syncopt::cuda::net::relu
