// The residual add (kernels.cu), with its fused ReLU. Backward: each input
// gets the add's output gradient (after the fused ReLU's mask); a kShared
// input 0 holds it already (nn/walk.hpp).
#include "kinds.hpp"
#include "syncopt_cuda/kernels.hpp"

namespace syncopt::cuda::net::add {

void forward(const Pass& ps, NodeRt& r, NodePlan& /*np*/, std::size_t j) {
  const nn::Node& node = *r.node;
  with_type(ps.numerics, [&]<class T>() {
    add_act_forward(ps.tensor<T>(node.inputs[0]), ps.tensor<T>(node.inputs[1]), ps.out_count(r),
                    node.relu, ps.output<T>(j), ps.stream);
  });
}

void backward(const Pass& ps, NodeRt& r, NodePlan& /*np*/, std::size_t j) {
  const nn::Node& node = *r.node;
  for (std::size_t slot = 0; slot < 2; ++slot) {
    ps.pass_on(ps.delivery(node, j, slot), ps.grad_of(node.inputs[slot]), ps.doutput(j),
               ps.out_count(r));
  }
}

}  // namespace syncopt::cuda::net::add
