// The hand-written CUDA kernels of the backend (memory-bound, elementwise or
// per-unit work; convolution, pooling and GEMM go to cuDNN / cuBLAS), behind
// plain host functions that enqueue on a stream and return at once. All
// pointers are device pointers. Each is the counterpart of a CPU function
// (lib/nn/ops.hpp, lib/optim/optimizer.hpp) and is tested against it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace syncopt::cuda {

// The kernels on activations and their gradients are templates over their
// storage type T: float, or __nv_bfloat16 with compute.precision = bf16
// (computed in float, stored rounded to nearest even); instantiated for both.

// y [n, c, hw] (NCHW, or [n, c] with hw = 1): y += bias[c], then
// y = max(y, 0) when relu.
template <class T>
void bias_act_forward(T* y, const float* bias, int n, int c, int hw, bool relu,
                      cudaStream_t stream);

// dx = dy * [y > 0] over n elements, from the ReLU's output y (in place ok);
// accumulate: dx += dy * [y > 0] (a tensor with several readers).
template <class T>
void relu_backward(const T* y, const T* dy, std::size_t n, T* dx, cudaStream_t stream,
                   bool accumulate = false);

// Residual add: y = a + b over n elements, then y = max(y, 0) when relu.
template <class T>
void add_act_forward(const T* a, const T* b, std::size_t n, bool relu, T* y, cudaStream_t stream);

// GELU over n elements, the exact form: y = x Phi(x), Phi the standard
// normal CDF; backward dx (+)= dy (Phi(x) + x phi(x)) from the input x
// (accumulate: +=). The CPU backend's oneDNN gelu_erf is the oracle.
template <class T>
void gelu_forward(const T* x, std::size_t n, T* y, cudaStream_t stream);
template <class T>
void gelu_backward(const T* x, const T* dy, std::size_t n, T* dx, bool accumulate,
                   cudaStream_t stream);

// dst += src over n elements (a gradient's later contribution).
template <class T>
void accumulate(T* dst, const T* src, std::size_t n, cudaStream_t stream);

// y = x over n elements, converted (float <-> bf16, rounding to nearest even).
template <class From, class To>
void convert(const From* x, std::size_t n, To* y, cudaStream_t stream);

// Dropout over the n elements of a batch tensor, element i being the one at
// logical (NCHW) position i: kept when nn::dropout::keep(node_key, i,
// threshold) (lib/nn/dropout.hpp, the CPU backend's very function), then
// scaled by keep_scale = 1 / (1 - rate).
//   forward:  y = keep ? x * keep_scale : 0
//   backward: dx (+)= keep ? dy * keep_scale : 0 (accumulate: +=)
// The mask is recomputed from the key in the backward, never stored.
template <class T>
void dropout_forward(const T* x, std::size_t n, std::uint64_t node_key, std::uint64_t threshold,
                     float keep_scale, T* y, cudaStream_t stream);
template <class T>
void dropout_backward(const T* dy, std::size_t n, std::uint64_t node_key, std::uint64_t threshold,
                      float keep_scale, T* dx, bool accumulate, cudaStream_t stream);

// The precise batch-norm statistics (docs/bn.md), one batch: per channel of
// x [n, c, hw], the mean and the biased variance of its n * hw values
// (two passes, in double), each rounded to float as the CPU backend's
// oneDNN gives them; then sums[ch] += mean, sums[c + ch] += var + mean^2 (in
// double). sums [2c] is zeroed by the caller before the first batch.
template <class T>
void bn_batch_statistics(const T* x, int n, int c, int hw, double* sums, cudaStream_t stream);
// After `batches` batches: mean = sums[ch] / batches, var = max(sums[c + ch]
// / batches - mean^2, 0), as floats.
void bn_finish_statistics(const double* sums, int c, int batches, float* mean, float* var,
                          cudaStream_t stream);

// db [c] = sum over n and hw of dy [n, c, hw] (overwritten), accumulated in
// double in a fixed order (deterministic). A two-stage reduction: blocks of
// (image range, channel) -- for hw = 1 (fc layers), of (row range, 32
// channels) -- write partial sums into `scratch`, which needs
// bias_backward_scratch(n, c, hw) doubles (enough for any batch up to n); a
// second kernel adds them per channel in chunk order.
std::size_t bias_backward_scratch(int n, int c, int hw);
template <class T>
void bias_backward(const T* dy, int n, int c, int hw, float* db, double* scratch,
                   cudaStream_t stream);

// The first stage's launch for (n, c, hw): `chunks` partial sums per
// channel of `per_chunk` images (rows) each, in `blocks` thread blocks.
// Pure (no GPU needed), for tests of how much of the GPU the kernel uses.
struct BiasBackwardShape {
  int chunks = 0;
  int per_chunk = 0;
  long long blocks = 0;
};
BiasBackwardShape bias_backward_shape(int n, int c, int hw);

// Weight normalisation per unit: w[o, :] = g[o] * v[o, :] / ||v[o, :]||.
// v, w [units, fan_in]; g, norm [units].
void weight_norm_forward(const float* v, const float* g, int units, int fan_in, float* w,
                         float* norm, cudaStream_t stream);
// dg_o = <dw_o, v_o> / n_o;  dv_o = (g_o / n_o) * (dw_o - (dg_o / n_o) * v_o).
void weight_norm_backward(const float* dw, const float* v, const float* g, const float* norm,
                          int units, int fan_in, float* dv, float* dg, cudaStream_t stream);

// Softmax cross-entropy per example. logits, dlogits [batch, classes];
// labels [batch]; loss [batch] = logsumexp(z) - z[label] (double);
// dlogits = (softmax - onehot) / batch unless null. A label outside
// [0, classes) sets *bad_label = 1 (its row gets loss 0 and gradient 0).
template <class T>
void softmax_cross_entropy(const T* logits, const std::int32_t* labels, int batch, int classes,
                           double* loss, T* dlogits, int* bad_label, cudaStream_t stream);

// x *= s over n elements.
void scale(float* x, std::size_t n, float s, cudaStream_t stream);

// sum[i] = w * g[i] (first) or sum[i] += w * g[i] over n elements (the
// host replica's formula, without contraction into an FMA): micro-batches.
void weighted_accumulate(float* sum, const float* g, std::size_t n, float w, bool first,
                         cudaStream_t stream);

// y[i] = x[i] * s over n elements.
void scaled_copy(const float* x, std::size_t n, float s, float* y, cudaStream_t stream);

// x[i] = v over n elements.
void fill(float* x, std::size_t n, float v, cudaStream_t stream);

// *flag = 1 if any of x [n] is infinite or NaN (left alone otherwise: the
// caller zeroes it first).
void flag_nonfinite(const float* x, std::size_t n, int* flag, cudaStream_t stream);

// The optimiser and EMA updates below compute optim/'s formulas
// (lib/optim/optimizer.cpp) in the same order of operations with explicitly
// rounded float operations (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn), so
// nvcc cannot contract them into FMAs: given the same inputs they equal the
// CPU's results bit for bit (the CPU build does not contract either: no FMA
// in the x86-64 baseline, no -ffast-math).

// SGD with momentum (optim::Optimizer "sgd"), n elements:
//   g = grad + wd * p;  mom = momentum * mom + g;  p -= lr * mom.
void sgd_step(float* params, const float* grad, float* mom, std::size_t n, float lr, float momentum,
              float wd, cudaStream_t stream);

// RMSProp with momentum, TensorFlow's (optim::Optimizer "rmsprop"):
//   g = grad + wd * p;  ms = decay * ms + (1 - decay) * g * g;
//   mom = momentum * mom + lr * g / sqrt(ms + eps);  p -= mom.
// ms starts at 1 (as in TF), mom at 0: the caller initialises them.
void rmsprop_step(float* params, const float* grad, float* ms, float* mom, std::size_t n, float lr,
                  float decay, float momentum, float eps, float wd, cudaStream_t stream);

// EMA of the parameters: avg = alpha * avg + (1 - alpha) * params, with
// 1 - alpha rounded to float first (as optim::Ema does).
void ema_update(float* avg, const float* params, std::size_t n, float alpha, cudaStream_t stream);

// The EMA's alpha after `updates` updates, as optim::Ema computes it:
// min(decay, (1 + t) / (10 + t)).
inline float ema_alpha(double decay, std::uint64_t updates) {
  const double t = static_cast<double>(updates);
  return static_cast<float>(std::min(decay, (1.0 + t) / (10.0 + t)));
}

}  // namespace syncopt::cuda
