// The residual add (oneDNN's binary add): the shortcut reordered into the
// main input's layout where they differ. Backward: dL/d(each input) =
// dL/doutput (after the fused ReLU's mask); input 0 shares the output's
// gradient buffer when nothing else reads it (nn::Delivery::kShared, the
// residual branch's last batch norm), the shortcut gets a copy, or a sum.
#include "common/error.hpp"
#include "nn/cpu/kinds.hpp"

namespace syncopt::nn::cpu::add {

bool plan_forward(Context& cx, Plan& plan, std::size_t j, Arena& arena) {
  const Node& node = cx.node(j);
  NodePlan& np = plan.nodes[j];
  const memory& in = cx.tensor(plan, node.inputs[0]);
  const memory& other = cx.tensor(plan, node.inputs[1]);
  np.src1 = other;
  if (other.get_desc() != in.get_desc()) {
    np.src1 = memory(in.get_desc(), cx.engine);
    np.src1_reorder = cx.make_reorder(plan, other, np.src1, node.name + " shortcut reorder");
  }
  const dnnl::binary::primitive_desc pd(cx.engine, dnnl::algorithm::binary_add, in.get_desc(),
                                        in.get_desc(), in.get_desc(), make_attr(node.relu));
  Context::note_scratch(plan, pd);
  plan.t[j] = arena.take(pd.dst_desc());
  np.fwd = Exec{dnnl::binary(pd),
                {{DNNL_ARG_SRC_0, in}, {DNNL_ARG_SRC_1, np.src1}, {DNNL_ARG_DST, plan.t[j]}},
                node.name + " fwd: " + pd.impl_info_str()};
  return false;
}

void plan_backward(Context& cx, Plan& plan, std::size_t j) {
  for (std::size_t slot = 0; slot < 2; ++slot) {
    const Delivery how = plan.grads.into[j][slot];
    if (how == Delivery::kNone) continue;
    if (how == Delivery::kShared) {
      // The buffer is the add's own (the network made it so); the layouts
      // agree because the add's output takes input 0's.
      const auto in0 = static_cast<std::size_t>(cx.node(j).inputs[0]);
      if (plan.t[in0].get_desc() != plan.d[j].get_desc()) {
        throw InternalError("the add '" + cx.node(j).name +
                            "' shares a gradient buffer with an input of another layout");
      }
      continue;
    }
    plan.nodes[j].deliveries.push_back(cx.plan_pass_on(plan, j, slot, plan.d[j]));
  }
}

void forward(Context& cx, Plan& plan, std::size_t j, const float* /*params*/, bool /*backward*/) {
  NodePlan& np = plan.nodes[j];
  cx.run(np.src1_reorder);
  cx.run(np.fwd);
}

}  // namespace syncopt::nn::cpu::add
