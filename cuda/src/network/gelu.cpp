// GELU, y = x Phi(x) (the exact erf form, as the CPU backend's oneDNN
// gelu_erf), by the kernels of kernels.cu; its backward reads the input.
#include "kinds.hpp"
#include "syncopt_cuda/kernels.hpp"

namespace syncopt::cuda::net::gelu {

void forward(const Pass& ps, NodeRt& r, NodePlan& /*np*/, std::size_t j) {
  with_type(ps.numerics, [&]<class T>() {
    gelu_forward(ps.tensor<T>(r.node->inputs[0]), ps.out_count(r), ps.output<T>(j), ps.stream);
  });
}

void backward(const Pass& ps, NodeRt& r, NodePlan& /*np*/, std::size_t j) {
  const Delivery d0 = ps.delivery(*r.node, j, 0);
  if (d0 == Delivery::kNone) return;
  with_type(ps.numerics, [&]<class T>() {
    gelu_backward(ps.tensor<T>(r.node->inputs[0]), ps.doutput<const T>(j), ps.out_count(r),
                  ps.grad_of<T>(r.node->inputs[0]), d0 == Delivery::kAccumulate, ps.stream);
  });
}

}  // namespace syncopt::cuda::net::gelu
