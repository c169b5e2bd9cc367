// Flatten (C x H x W -> C*H*W in NCHW order) as a node of its own (one the
// graph kept: read by a layer other than fc): a reorder of its input, in
// whatever layout it has, into a plain buffer; its backward passes the
// gradient, viewed as the plain 4D input, on.
#include "nn/cpu/kinds.hpp"

namespace syncopt::nn::cpu::flatten {

bool plan_forward(Context& cx, Plan& plan, std::size_t j, Arena& arena) {
  const Node& node = cx.node(j);
  NodePlan& np = plan.nodes[j];
  const memory& in = cx.tensor(plan, node.inputs[0]);
  plan.t[j] = arena.take(plain_desc(with_batch(plan.batch, node.out), cx.act));
  np.view4 = memory(plain_desc(with_batch(plan.batch, node.in), cx.act), cx.engine,
                    plan.t[j].get_data_handle());
  np.fwd = cx.make_reorder(plan, in, np.view4, node.name + " fwd");
  return false;
}

void plan_backward(Context& cx, Plan& plan, std::size_t j) {
  if (!cx.wants_grad(plan, j, 0)) return;
  const memory dview(plain_desc(with_batch(plan.batch, cx.node(j).in), cx.act), cx.engine,
                     plan.d[j].get_data_handle());
  plan.nodes[j].deliveries.push_back(cx.plan_pass_on(plan, j, 0, dview));
}

}  // namespace syncopt::nn::cpu::flatten
