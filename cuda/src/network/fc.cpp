// Fully connected layers through cuBLAS sgemm in FP32 (CUBLAS_DEFAULT_MATH,
// no TF32). Row-major tensors as cuBLAS's column-major transposes.
#include "kinds.hpp"
#include "syncopt_cuda/check.hpp"

namespace syncopt::cuda::net::fc {

void forward(const Pass& ps, NodeRt& r, NodePlan& /*np*/, std::size_t j) {
  weighted::forward_weights(ps, r);
  float* y = ps.output(j);
  // Row-major y [n, out] = x [n, in] w[out, in]^T, i.e. column-major
  // y^T (out x n) = op_T(w as in x out) * x^T (in x n).
  SYNCOPT_CHECK_CUBLAS(cublasSgemm(ps.cublas, CUBLAS_OP_T, CUBLAS_OP_N, r.units, ps.batch, r.fan_in,
                                   &kOne, ps.weights(r), r.fan_in, ps.tensor(r.node->inputs[0]),
                                   r.fan_in, &kZero, y, r.units));
  weighted::forward_bias_act(ps, r, y, 1);
}

void backward(const Pass& ps, NodeRt& r, NodePlan& /*np*/, std::size_t j) {
  const nn::Node& node = *r.node;
  const float* dy = ps.doutput(j);
  const float* x = ps.tensor(node.inputs[0]);
  weighted::backward_bias(ps, r, dy);
  float* dw = r.weight_norm ? r.dw.get() : ps.G + r.w_off;
  // Row-major dw [out, in] = dy^T x, i.e. column-major
  // dw^T (in x out) = x^T (in x n) * op_T(dy^T as out x n).
  SYNCOPT_CHECK_CUBLAS(cublasSgemm(ps.cublas, CUBLAS_OP_N, CUBLAS_OP_T, r.fan_in, r.units, ps.batch,
                                   &kOne, x, r.fan_in, dy, r.units, &kZero, dw, r.fan_in));
  weighted::backward_weight_norm(ps, r);
  const Delivery d0 = ps.delivery(node, j, 0);
  if (d0 == Delivery::kNone) return;
  // Row-major dx [n, in] = dy [n, out] w [out, in], i.e. column-major
  // dx^T (in x n) = (w as in x out) * dy^T (out x n).
  SYNCOPT_CHECK_CUBLAS(cublasSgemm(ps.cublas, CUBLAS_OP_N, CUBLAS_OP_N, r.fan_in, ps.batch, r.units,
                                   &kOne, ps.weights(r), r.fan_in, dy, r.units, beta_of(d0),
                                   ps.grad_of(node.inputs[0]), r.fan_in));
}

}  // namespace syncopt::cuda::net::fc
