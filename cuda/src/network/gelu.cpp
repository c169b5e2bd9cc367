// GELU, y = x Phi(x) (the exact erf form, as the CPU backend's oneDNN
// gelu_erf), by the kernels of kernels.cu; its backward reads the input.
#include "kinds.hpp"
#include "syncopt_cuda/kernels.hpp"

namespace syncopt::cuda::net::gelu {

void forward(const Pass& ps, NodeRt& r, NodePlan& /*np*/, std::size_t j) {
  gelu_forward(ps.tensor(r.node->inputs[0]), ps.out_count(r), ps.output(j), ps.stream);
}

void backward(const Pass& ps, NodeRt& r, NodePlan& /*np*/, std::size_t j) {
  const Delivery d0 = ps.delivery(*r.node, j, 0);
  if (d0 == Delivery::kNone) return;
  gelu_backward(ps.tensor(r.node->inputs[0]), ps.doutput(j), ps.out_count(r),
                ps.grad_of(r.node->inputs[0]), d0 == Delivery::kAccumulate, ps.stream);
}

}  // namespace syncopt::cuda::net::gelu
