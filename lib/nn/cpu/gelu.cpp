// GELU, y = x Phi(x) with Phi the standard normal CDF (oneDNN's eltwise
// gelu_erf, the exact form; PyTorch's nn.GELU() default). Its backward
// needs the input (dy/dx = Phi(x) + x phi(x)), which the training plan
// keeps anyway.
#include "nn/cpu/kinds.hpp"

namespace syncopt::nn::cpu::gelu {

namespace {

constexpr auto kAlgorithm = dnnl::algorithm::eltwise_gelu_erf;

}  // namespace

bool plan_forward(Context& cx, Plan& plan, std::size_t j, Arena& arena) {
  return eltwise::plan_forward(cx, plan, j, arena, kAlgorithm);
}

void plan_backward(Context& cx, Plan& plan, std::size_t j) {
  eltwise::plan_backward(cx, plan, j, kAlgorithm, false);
}

}  // namespace syncopt::nn::cpu::gelu
