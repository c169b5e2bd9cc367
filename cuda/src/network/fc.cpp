// Fully connected layers through cuBLAS: cublasGemmEx with FP32 compute
// (CUBLAS_COMPUTE_32F: strict FP32, or CUBLAS_COMPUTE_32F_FAST_TF32 with
// compute.tf32) on FP32 or bf16 data; the weight gradient is written in FP32
// in either precision. Row-major tensors as cuBLAS's column-major
// transposes.
#include "kinds.hpp"
#include "syncopt_cuda/check.hpp"

namespace syncopt::cuda::net::fc {

namespace {

cublasComputeType_t compute_type(const Numerics& n) {
  return (!n.bf16 && n.tf32) ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

// C (ldc) = alpha op(A) op(B) + beta C, column-major m x n x k; A and B in
// the activations' type, C in c_type.
void gemm(const Pass& ps, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
          const void* a, int lda, const void* b, int ldb, const float* beta, void* c,
          cudaDataType_t c_type, int ldc) {
  const cudaDataType_t t = ps.numerics.blas_data();
  SYNCOPT_CHECK_CUBLAS(cublasGemmEx(ps.cublas, ta, tb, m, n, k, &kOne, a, t, lda, b, t, ldb, beta,
                                    c, c_type, ldc, compute_type(ps.numerics),
                                    CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void forward(const Pass& ps, NodeRt& r, NodePlan& /*np*/, std::size_t j) {
  weighted::forward_weights(ps, r);
  void* y = ps.output(j);
  // Row-major y [n, out] = x [n, in] w[out, in]^T, i.e. column-major
  // y^T (out x n) = op_T(w as in x out) * x^T (in x n).
  gemm(ps, CUBLAS_OP_T, CUBLAS_OP_N, r.units, ps.batch, r.fan_in, ps.weights(r), r.fan_in,
       ps.tensor(r.node->inputs[0]), r.fan_in, &kZero, y, ps.numerics.blas_data(), r.units);
  weighted::forward_bias_act(ps, r, y, 1);
}

void backward(const Pass& ps, NodeRt& r, NodePlan& /*np*/, std::size_t j) {
  const nn::Node& node = *r.node;
  const void* dy = ps.doutput(j);
  weighted::backward_bias(ps, r, dy);
  // Row-major dw [out, in] = dy^T x, i.e. column-major
  // dw^T (in x out) = x^T (in x n) * op_T(dy^T as out x n); FP32 out.
  gemm(ps, CUBLAS_OP_N, CUBLAS_OP_T, r.fan_in, r.units, ps.batch, ps.tensor(node.inputs[0]),
       r.fan_in, dy, r.units, &kZero, weighted::weight_grad(ps, r), CUDA_R_32F, r.fan_in);
  weighted::backward_weight_norm(ps, r);
  const Delivery d0 = ps.delivery(node, j, 0);
  if (d0 == Delivery::kNone) return;
  // Row-major dx [n, in] = dy [n, out] w [out, in], i.e. column-major
  // dx^T (in x n) = (w as in x out) * dy^T (out x n).
  gemm(ps, CUBLAS_OP_N, CUBLAS_OP_N, r.fan_in, ps.batch, r.units, ps.weights(r), r.fan_in, dy,
       r.units, beta_of(d0), ps.grad_of(node.inputs[0]), ps.numerics.blas_data(), r.fan_in);
}

}  // namespace syncopt::cuda::net::fc
