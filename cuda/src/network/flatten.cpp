// Flatten: NCHW is already the flattened order, so a copy forward and the
// gradient passed on backward.
#include "kinds.hpp"
#include "syncopt_cuda/check.hpp"

namespace syncopt::cuda::net::flatten {

void forward(const Pass& ps, NodeRt& r, NodePlan& /*np*/, std::size_t j) {
  SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(ps.output(j), ps.tensor(r.node->inputs[0]),
                                     ps.nbytes(ps.out_count(r)), cudaMemcpyDeviceToDevice,
                                     ps.stream));
}

void backward(const Pass& ps, NodeRt& r, NodePlan& /*np*/, std::size_t j) {
  const nn::Node& node = *r.node;
  ps.pass_on(ps.delivery(node, j, 0), ps.grad_of(node.inputs[0]), ps.doutput(j), ps.out_count(r));
}

}  // namespace syncopt::cuda::net::flatten
