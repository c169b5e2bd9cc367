// The backend's small CUDA kernels (see syncopt_cuda/kernels.hpp for the
// formulas and shapes). Elementwise kernels use grid-stride loops; reductions
// accumulate in double in a fixed order (deterministic), like the CPU
// reference.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "nn/dropout.hpp"
#include "syncopt_cuda/check.hpp"
#include "syncopt_cuda/kernels.hpp"

namespace syncopt::cuda {

namespace {

constexpr int kThreads = 256;  // per block, a multiple of the warp size

// Activations and their gradients are stored as T (float, or bf16 with
// compute.precision = bf16) and computed on in float: ld reads one, st
// rounds a float back (to nearest even). For T = float both are the
// identity, so the FP32 path is the arithmetic it always was.
__device__ __forceinline__ float ld(float v) { return v; }
__device__ __forceinline__ float ld(__nv_bfloat16 v) { return __bfloat162float(v); }
template <class T>
__device__ __forceinline__ T st(float v);
template <>
__device__ __forceinline__ float st<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 st<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

// Enough blocks to cover n with kThreads each, capped: the loops are
// grid-stride, and a few waves of blocks saturate memory bandwidth.
unsigned int blocks_for(std::size_t n) {
  const std::size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned int>(std::clamp<std::size_t>(b, 1, 65535));
}

void check_launch(const char* kernel) {
  const cudaError_t rc = cudaGetLastError();
  if (rc != cudaSuccess)
    detail::throw_error("CUDA", cudaGetErrorString(rc), kernel, __FILE__, __LINE__);
}

// Sum of `v` over the block (all threads get the result). kThreads threads.
__device__ double block_sum(double v) {
  __shared__ double partial[kThreads / 32];
  __shared__ double total;
  for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    double s = 0.0;
    for (int w = 0; w < kThreads / 32; ++w) s += partial[w];
    total = s;
  }
  __syncthreads();
  const double out = total;
  __syncthreads();  // partial/total may be reused by a second call
  return out;
}

template <class T>
__global__ void bias_act_kernel(T* y, const float* bias, std::size_t total, int c, int hw,
                                bool relu) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < total;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const int ch =
        static_cast<int>((i / static_cast<std::size_t>(hw)) % static_cast<std::size_t>(c));
    const float v = ld(y[i]) + (bias != nullptr ? bias[ch] : 0.0f);
    y[i] = st<T>(relu ? fmaxf(v, 0.0f) : v);
  }
}

template <class T>
__global__ void relu_backward_kernel(const T* y, const T* dy, std::size_t n, T* dx,
                                     bool accumulate) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const float g = ld(y[i]) > 0.0f ? ld(dy[i]) : 0.0f;
    dx[i] = st<T>(accumulate ? ld(dx[i]) + g : g);
  }
}

template <class T>
__global__ void add_act_kernel(const T* a, const T* b, std::size_t n, bool relu, T* y) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const float v = ld(a[i]) + ld(b[i]);
    y[i] = st<T>(relu ? fmaxf(v, 0.0f) : v);
  }
}

// GELU, exact form: y = x Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2;
// dy/dx = Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi). In float,
// as oneDNN's gelu_erf on the CPU.
template <class T>
__global__ void gelu_forward_kernel(const T* x, std::size_t n, T* y) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const float v = ld(x[i]);
    y[i] = st<T>(0.5f * v * (1.0f + erff(v * 0.70710678118654752f)));
  }
}

template <class T>
__global__ void gelu_backward_kernel(const T* x, const T* dy, std::size_t n, T* dx,
                                     bool accumulate) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const float v = ld(x[i]);
    const float cdf = 0.5f * (1.0f + erff(v * 0.70710678118654752f));
    const float pdf = 0.39894228040143268f * expf(-0.5f * v * v);
    const float g = ld(dy[i]) * (cdf + v * pdf);
    dx[i] = st<T>(accumulate ? ld(dx[i]) + g : g);
  }
}

template <class T>
__global__ void accumulate_kernel(T* dst, const T* src, std::size_t n) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    dst[i] = st<T>(ld(dst[i]) + ld(src[i]));
  }
}

template <class T>
__global__ void dropout_forward_kernel(const T* x, std::size_t n, std::uint64_t key,
                                       std::uint64_t threshold, float keep_scale, T* y) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    y[i] = st<T>(nn::dropout::keep(key, i, threshold) ? ld(x[i]) * keep_scale : 0.0f);
  }
}

template <class T>
__global__ void dropout_backward_kernel(const T* dy, std::size_t n, std::uint64_t key,
                                        std::uint64_t threshold, float keep_scale, T* dx,
                                        bool accumulate) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    // Rounded before the sum (no FMA contraction), as the CPU backend computes it.
    const float g = nn::dropout::keep(key, i, threshold) ? __fmul_rn(ld(dy[i]), keep_scale) : 0.0f;
    dx[i] = st<T>(accumulate ? ld(dx[i]) + g : g);
  }
}

// One block per channel ch of x [n, c, hw]: the mean, then the mean squared
// deviation, both summed in double in a fixed order (deterministic).
template <class T>
__global__ void bn_batch_statistics_kernel(const T* x, int n, int c, int hw, double* sums) {
  const int ch = blockIdx.x;
  const long long count = static_cast<long long>(n) * hw;
  double s = 0.0;
  for (long long k = threadIdx.x; k < count; k += blockDim.x) {
    const long long img = k / hw, pos = k % hw;
    s += ld(x[(img * c + ch) * hw + pos]);
  }
  const double mean = block_sum(s) / static_cast<double>(count);
  double q = 0.0;
  for (long long k = threadIdx.x; k < count; k += blockDim.x) {
    const long long img = k / hw, pos = k % hw;
    const double d = ld(x[(img * c + ch) * hw + pos]) - mean;
    q += d * d;
  }
  const double var = block_sum(q) / static_cast<double>(count);
  if (threadIdx.x == 0) {
    const float mean_f = static_cast<float>(mean), var_f = static_cast<float>(var);
    sums[ch] += mean_f;
    sums[c + ch] += static_cast<double>(var_f) + static_cast<double>(mean_f) * mean_f;
  }
}

__global__ void bn_finish_statistics_kernel(const double* sums, int c, int batches, float* mean,
                                            float* var) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  const double m = sums[ch] / batches;
  const double v = sums[c + ch] / batches - m * m;
  mean[ch] = static_cast<float>(m);
  var[ch] = static_cast<float>(v > 0.0 ? v : 0.0);
}

// Bias gradient, convolutions (hw > 1). Stage 1: block (j, ch) sums the
// images [j * per_chunk, min(n, (j + 1) * per_chunk)) of channel ch, all hw
// positions, into partial[ch * chunks + j]. The thread walks the flattened
// (image, position) index with two counters, so the loop has no division.
// dy [n, c, hw].
template <class T>
__global__ void bias_partial_kernel(const T* dy, int n, int c, int hw, int per_chunk,
                                    double* partial) {
  const int j = blockIdx.x, ch = blockIdx.y;
  const int img0 = j * per_chunk;
  const int imgs = min(per_chunk, n - img0);
  const int step_img = static_cast<int>(blockDim.x) / hw;
  const int step_pos = static_cast<int>(blockDim.x) % hw;
  int img = static_cast<int>(threadIdx.x) / hw;
  int pos = static_cast<int>(threadIdx.x) % hw;
  double s = 0.0;
  while (img < imgs) {
    s += ld(dy[(static_cast<std::size_t>(img0 + img) * c + ch) * hw + pos]);
    img += step_img;
    pos += step_pos;
    if (pos >= hw) {
      pos -= hw;
      ++img;
    }
  }
  s = block_sum(s);
  if (threadIdx.x == 0) partial[static_cast<std::size_t>(ch) * gridDim.x + j] = s;
}

// Stage 2: one thread per channel adds its chunks in order.
__global__ void bias_finish_kernel(const double* partial, int c, int chunks, float* db) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  double s = 0.0;
  for (int j = 0; j < chunks; ++j) s += partial[static_cast<std::size_t>(ch) * chunks + j];
  db[ch] = static_cast<float>(s);
}

// Bias gradient, fc layers (hw = 1), stage 1: dy [n, c]. Block (j, k) sums
// the rows [j * per_chunk, min(n, (j + 1) * per_chunk)) of the kFcCols
// channels from k * kFcCols: threadIdx.x picks the channel (a warp reads
// consecutive floats of a row), threadIdx.y strides the rows; the kFcRows
// partial sums of a channel are added in y order, into partial[ch * chunks
// + j]. Many blocks, where one thread per channel walking the whole batch
// left all but one or two multiprocessors idle.
constexpr int kFcCols = 32;
constexpr int kFcRows = kThreads / kFcCols;
template <class T>
__global__ void bias_rows_partial_kernel(const T* dy, int n, int c, int per_chunk,
                                         double* partial) {
  __shared__ double part[kFcRows][kFcCols];
  const int j = blockIdx.x;
  const int ch = static_cast<int>(blockIdx.y) * kFcCols + static_cast<int>(threadIdx.x);
  const int r0 = j * per_chunk;
  const int r1 = min(n, r0 + per_chunk);
  double s = 0.0;
  if (ch < c) {
    for (int r = r0 + static_cast<int>(threadIdx.y); r < r1; r += kFcRows) {
      s += ld(dy[static_cast<std::size_t>(r) * c + ch]);
    }
  }
  part[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  if (threadIdx.y == 0 && ch < c) {
    double t = 0.0;
    for (int y = 0; y < kFcRows; ++y) t += part[y][threadIdx.x];
    partial[static_cast<std::size_t>(ch) * gridDim.x + j] = t;
  }
}

// Chunks per channel: about kBiasChunkElems elements each for convolutions,
// kFcRowsPerChunk rows for fc layers; at most kMaxBiasChunks (and at most
// one per image), which bounds the scratch for any batch.
constexpr int kBiasChunkElems = kThreads * 32;
constexpr int kFcRowsPerChunk = 16;
constexpr int kMaxBiasChunks = 64;

int bias_images_per_chunk(int n, int hw) {
  const long long per_elem = hw > 1 ? kBiasChunkElems : static_cast<long long>(kFcRowsPerChunk);
  const long long per_channel = static_cast<long long>(n) * hw;
  long long chunks = (per_channel + per_elem - 1) / per_elem;
  chunks = std::clamp<long long>(chunks, 1, std::min<long long>(kMaxBiasChunks, n));
  return static_cast<int>((n + chunks - 1) / chunks);
}

// One block per unit.
__global__ void weight_norm_forward_kernel(const float* v, const float* g, int fan_in, float* w,
                                           float* norm) {
  const std::size_t o = blockIdx.x;
  const float* vo = v + o * fan_in;
  double ss = 0.0;
  for (int i = threadIdx.x; i < fan_in; i += blockDim.x) ss += static_cast<double>(vo[i]) * vo[i];
  ss = block_sum(ss);
  // A unit whose v is exactly zero has no direction; keep it finite.
  const double nrm = fmax(sqrt(ss), 1e-30);
  if (threadIdx.x == 0) norm[o] = static_cast<float>(nrm);
  const float scale = static_cast<float>(static_cast<double>(g[o]) / nrm);
  float* wo = w + o * fan_in;
  for (int i = threadIdx.x; i < fan_in; i += blockDim.x) wo[i] = scale * vo[i];
}

__global__ void weight_norm_backward_kernel(const float* dw, const float* v, const float* g,
                                            const float* norm, int fan_in, float* dv, float* dg) {
  const std::size_t o = blockIdx.x;
  const float* dwo = dw + o * fan_in;
  const float* vo = v + o * fan_in;
  double dot = 0.0;
  for (int i = threadIdx.x; i < fan_in; i += blockDim.x) dot += static_cast<double>(dwo[i]) * vo[i];
  dot = block_sum(dot);
  const double nrm = static_cast<double>(norm[o]);
  const double dgo = dot / nrm;
  if (threadIdx.x == 0) dg[o] = static_cast<float>(dgo);
  const float a = static_cast<float>(static_cast<double>(g[o]) / nrm);
  const float b = static_cast<float>(dgo / nrm);
  float* dvo = dv + o * fan_in;
  for (int i = threadIdx.x; i < fan_in; i += blockDim.x) dvo[i] = a * (dwo[i] - b * vo[i]);
}

// One thread per example: the class count is small (10 here).
template <class T>
__global__ void softmax_xent_kernel(const T* logits, const std::int32_t* labels, int batch,
                                    int classes, double* loss, T* dlogits, int* bad_label) {
  const int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= batch) return;
  const T* z = logits + static_cast<std::size_t>(r) * classes;
  const int label = labels[r];
  T* dz = dlogits == nullptr ? nullptr : dlogits + static_cast<std::size_t>(r) * classes;
  if (label < 0 || label >= classes) {
    *bad_label = 1;
    loss[r] = 0.0;
    if (dz != nullptr) {
      for (int k = 0; k < classes; ++k) dz[k] = st<T>(0.0f);
    }
    return;
  }
  double zmax = ld(z[0]);
  for (int k = 1; k < classes; ++k) zmax = fmax(zmax, static_cast<double>(ld(z[k])));
  double sum = 0.0;
  for (int k = 0; k < classes; ++k) sum += exp(static_cast<double>(ld(z[k])) - zmax);
  const double lse = zmax + log(sum);
  loss[r] = lse - static_cast<double>(ld(z[label]));
  if (dz != nullptr) {
    const double inv_batch = 1.0 / batch;
    for (int k = 0; k < classes; ++k) {
      const double p = exp(static_cast<double>(ld(z[k])) - lse);
      dz[k] = st<T>(static_cast<float>((p - (k == label ? 1.0 : 0.0)) * inv_batch));
    }
  }
}

__global__ void scale_kernel(float* x, std::size_t n, float s) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    x[i] *= s;
  }
}

__global__ void weighted_accumulate_kernel(float* sum, const float* g, std::size_t n, float w,
                                           bool first) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const float term = __fmul_rn(w, g[i]);
    sum[i] = first ? term : __fadd_rn(sum[i], term);
  }
}

__global__ void scaled_copy_kernel(const float* x, std::size_t n, float s, float* y) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    y[i] = x[i] * s;
  }
}

__global__ void fill_kernel(float* x, std::size_t n, float v) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    x[i] = v;
  }
}

__global__ void nonfinite_kernel(const float* x, std::size_t n, int* flag) {
  bool bad = false;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    // Exponent all ones: infinity or NaN.
    bad = bad || (__float_as_uint(x[i]) & 0x7f800000u) == 0x7f800000u;
  }
  if (bad) atomicOr(flag, 1);
}

// optim::Optimizer::step, "sgd", element by element in its order.
__global__ void sgd_kernel(float* p, const float* grad, float* mom, std::size_t n, float lr,
                           float mu, float wd) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const float g = __fadd_rn(grad[i], __fmul_rn(wd, p[i]));
    const float m = __fadd_rn(__fmul_rn(mu, mom[i]), g);
    mom[i] = m;
    p[i] = __fsub_rn(p[i], __fmul_rn(lr, m));
  }
}

// optim::Optimizer::step, "rmsprop"; one_minus_d = 1.0f - d rounded on the
// host, as the CPU rounds it.
__global__ void rmsprop_kernel(float* p, const float* grad, float* ms, float* mom, std::size_t n,
                               float lr, float d, float one_minus_d, float mu, float eps,
                               float wd) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    const float g = __fadd_rn(grad[i], __fmul_rn(wd, p[i]));
    const float s = __fadd_rn(__fmul_rn(d, ms[i]), __fmul_rn(__fmul_rn(one_minus_d, g), g));
    ms[i] = s;
    const float step = __fdiv_rn(__fmul_rn(lr, g), __fsqrt_rn(__fadd_rn(s, eps)));
    const float m = __fadd_rn(__fmul_rn(mu, mom[i]), step);
    mom[i] = m;
    p[i] = __fsub_rn(p[i], m);
  }
}

// optim::Ema::update.
__global__ void ema_kernel(float* avg, const float* p, std::size_t n, float a, float b) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    avg[i] = __fadd_rn(__fmul_rn(a, avg[i]), __fmul_rn(b, p[i]));
  }
}

template <class From, class To>
__global__ void convert_kernel(const From* x, std::size_t n, To* y) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x) {
    y[i] = st<To>(ld(x[i]));
  }
}

}  // namespace

template <class T>
void bias_act_forward(T* y, const float* bias, int n, int c, int hw, bool relu,
                      cudaStream_t stream) {
  const std::size_t total = static_cast<std::size_t>(n) * c * hw;
  if (total == 0) return;
  bias_act_kernel<<<blocks_for(total), kThreads, 0, stream>>>(y, bias, total, c, hw, relu);
  check_launch("bias_act_kernel");
}

template <class T>
void relu_backward(const T* y, const T* dy, std::size_t n, T* dx, cudaStream_t stream,
                   bool accumulate) {
  if (n == 0) return;
  relu_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(y, dy, n, dx, accumulate);
  check_launch("relu_backward_kernel");
}

template <class T>
void add_act_forward(const T* a, const T* b, std::size_t n, bool relu, T* y, cudaStream_t stream) {
  if (n == 0) return;
  add_act_kernel<<<blocks_for(n), kThreads, 0, stream>>>(a, b, n, relu, y);
  check_launch("add_act_kernel");
}

template <class T>
void gelu_forward(const T* x, std::size_t n, T* y, cudaStream_t stream) {
  if (n == 0) return;
  gelu_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, y);
  check_launch("gelu_forward_kernel");
}

template <class T>
void gelu_backward(const T* x, const T* dy, std::size_t n, T* dx, bool accumulate,
                   cudaStream_t stream) {
  if (n == 0) return;
  gelu_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, dy, n, dx, accumulate);
  check_launch("gelu_backward_kernel");
}

template <class T>
void accumulate(T* dst, const T* src, std::size_t n, cudaStream_t stream) {
  if (n == 0) return;
  accumulate_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dst, src, n);
  check_launch("accumulate_kernel");
}

template <class T>
void dropout_forward(const T* x, std::size_t n, std::uint64_t node_key, std::uint64_t threshold,
                     float keep_scale, T* y, cudaStream_t stream) {
  if (n == 0) return;
  dropout_forward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, node_key, threshold,
                                                                 keep_scale, y);
  check_launch("dropout_forward_kernel");
}

template <class T>
void dropout_backward(const T* dy, std::size_t n, std::uint64_t node_key, std::uint64_t threshold,
                      float keep_scale, T* dx, bool accumulate, cudaStream_t stream) {
  if (n == 0) return;
  dropout_backward_kernel<<<blocks_for(n), kThreads, 0, stream>>>(dy, n, node_key, threshold,
                                                                  keep_scale, dx, accumulate);
  check_launch("dropout_backward_kernel");
}

template <class T>
void bn_batch_statistics(const T* x, int n, int c, int hw, double* sums, cudaStream_t stream) {
  if (n <= 0 || c <= 0 || hw <= 0) return;
  bn_batch_statistics_kernel<<<static_cast<unsigned int>(c), kThreads, 0, stream>>>(x, n, c, hw,
                                                                                    sums);
  check_launch("bn_batch_statistics_kernel");
}

void bn_finish_statistics(const double* sums, int c, int batches, float* mean, float* var,
                          cudaStream_t stream) {
  if (c <= 0) return;
  const unsigned int blocks = static_cast<unsigned int>((c + kThreads - 1) / kThreads);
  bn_finish_statistics_kernel<<<blocks, kThreads, 0, stream>>>(sums, c, batches, mean, var);
  check_launch("bn_finish_statistics_kernel");
}

std::size_t bias_backward_scratch(int n, int c, int hw) {
  if (hw < 1 || n <= 0 || c <= 0) return 0;
  // chunks <= min(kMaxBiasChunks, n) for every batch up to n.
  return static_cast<std::size_t>(std::min(kMaxBiasChunks, n)) * static_cast<std::size_t>(c);
}

BiasBackwardShape bias_backward_shape(int n, int c, int hw) {
  BiasBackwardShape sh;
  if (n <= 0 || c <= 0 || hw < 1) return sh;
  sh.per_chunk = bias_images_per_chunk(n, hw);
  sh.chunks = (n + sh.per_chunk - 1) / sh.per_chunk;
  const long long channel_groups = hw == 1 ? (c + kFcCols - 1) / kFcCols : c;
  sh.blocks = static_cast<long long>(sh.chunks) * channel_groups;
  return sh;
}

template <class T>
void bias_backward(const T* dy, int n, int c, int hw, float* db, double* scratch,
                   cudaStream_t stream) {
  if (c == 0) return;
  if (n == 0) {  // an empty sum: db is still overwritten
    SYNCOPT_CHECK_CUDA(cudaMemsetAsync(db, 0, static_cast<std::size_t>(c) * sizeof(float), stream));
    return;
  }
  const BiasBackwardShape sh = bias_backward_shape(n, c, hw);
  const auto chunks = static_cast<unsigned int>(sh.chunks);
  if (hw == 1) {
    const dim3 grid(chunks, static_cast<unsigned int>((c + kFcCols - 1) / kFcCols));
    bias_rows_partial_kernel<<<grid, dim3(kFcCols, kFcRows), 0, stream>>>(dy, n, c, sh.per_chunk,
                                                                          scratch);
    check_launch("bias_rows_partial_kernel");
  } else {
    bias_partial_kernel<<<dim3(chunks, static_cast<unsigned int>(c)), kThreads, 0, stream>>>(
        dy, n, c, hw, sh.per_chunk, scratch);
    check_launch("bias_partial_kernel");
  }
  const unsigned int channel_blocks = static_cast<unsigned int>((c + kThreads - 1) / kThreads);
  bias_finish_kernel<<<channel_blocks, kThreads, 0, stream>>>(scratch, c, sh.chunks, db);
  check_launch("bias_finish_kernel");
}

void weight_norm_forward(const float* v, const float* g, int units, int fan_in, float* w,
                         float* norm, cudaStream_t stream) {
  if (units == 0) return;
  weight_norm_forward_kernel<<<units, kThreads, 0, stream>>>(v, g, fan_in, w, norm);
  check_launch("weight_norm_forward_kernel");
}

void weight_norm_backward(const float* dw, const float* v, const float* g, const float* norm,
                          int units, int fan_in, float* dv, float* dg, cudaStream_t stream) {
  if (units == 0) return;
  weight_norm_backward_kernel<<<units, kThreads, 0, stream>>>(dw, v, g, norm, fan_in, dv, dg);
  check_launch("weight_norm_backward_kernel");
}

template <class T>
void softmax_cross_entropy(const T* logits, const std::int32_t* labels, int batch, int classes,
                           double* loss, T* dlogits, int* bad_label, cudaStream_t stream) {
  if (batch == 0) return;
  const unsigned int blocks = static_cast<unsigned int>((batch + kThreads - 1) / kThreads);
  softmax_xent_kernel<<<blocks, kThreads, 0, stream>>>(logits, labels, batch, classes, loss,
                                                       dlogits, bad_label);
  check_launch("softmax_xent_kernel");
}

void scale(float* x, std::size_t n, float s, cudaStream_t stream) {
  if (n == 0) return;
  scale_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, s);
  check_launch("scale_kernel");
}

void weighted_accumulate(float* sum, const float* g, std::size_t n, float w, bool first,
                         cudaStream_t stream) {
  if (n == 0) return;
  weighted_accumulate_kernel<<<blocks_for(n), kThreads, 0, stream>>>(sum, g, n, w, first);
  check_launch("weighted_accumulate_kernel");
}

void scaled_copy(const float* x, std::size_t n, float s, float* y, cudaStream_t stream) {
  if (n == 0) return;
  scaled_copy_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, s, y);
  check_launch("scaled_copy_kernel");
}

void fill(float* x, std::size_t n, float v, cudaStream_t stream) {
  if (n == 0) return;
  fill_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, v);
  check_launch("fill_kernel");
}

void flag_nonfinite(const float* x, std::size_t n, int* flag, cudaStream_t stream) {
  if (n == 0) return;
  // A few waves of blocks: each thread checks many elements and the flag is
  // touched only where something is wrong.
  const unsigned int blocks = std::min(blocks_for(n), 1024u);
  nonfinite_kernel<<<blocks, kThreads, 0, stream>>>(x, n, flag);
  check_launch("nonfinite_kernel");
}

void sgd_step(float* params, const float* grad, float* mom, std::size_t n, float lr, float momentum,
              float wd, cudaStream_t stream) {
  if (n == 0) return;
  sgd_kernel<<<blocks_for(n), kThreads, 0, stream>>>(params, grad, mom, n, lr, momentum, wd);
  check_launch("sgd_kernel");
}

void rmsprop_step(float* params, const float* grad, float* ms, float* mom, std::size_t n, float lr,
                  float decay, float momentum, float eps, float wd, cudaStream_t stream) {
  if (n == 0) return;
  const float one_minus_d = 1.0f - decay;
  rmsprop_kernel<<<blocks_for(n), kThreads, 0, stream>>>(params, grad, ms, mom, n, lr, decay,
                                                         one_minus_d, momentum, eps, wd);
  check_launch("rmsprop_kernel");
}

void ema_update(float* avg, const float* params, std::size_t n, float alpha, cudaStream_t stream) {
  if (n == 0) return;
  ema_kernel<<<blocks_for(n), kThreads, 0, stream>>>(avg, params, n, alpha, 1.0f - alpha);
  check_launch("ema_kernel");
}

template <class From, class To>
void convert(const From* x, std::size_t n, To* y, cudaStream_t stream) {
  if (n == 0) return;
  convert_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, y);
  check_launch("convert_kernel");
}

// The two storage types of activations.
#define SYNCOPT_ACT_KERNELS(T)                                                                     \
  template void bias_act_forward<T>(T*, const float*, int, int, int, bool, cudaStream_t);          \
  template void relu_backward<T>(const T*, const T*, std::size_t, T*, cudaStream_t, bool);         \
  template void add_act_forward<T>(const T*, const T*, std::size_t, bool, T*, cudaStream_t);       \
  template void gelu_forward<T>(const T*, std::size_t, T*, cudaStream_t);                          \
  template void gelu_backward<T>(const T*, const T*, std::size_t, T*, bool, cudaStream_t);         \
  template void accumulate<T>(T*, const T*, std::size_t, cudaStream_t);                            \
  template void dropout_forward<T>(const T*, std::size_t, std::uint64_t, std::uint64_t, float, T*, \
                                   cudaStream_t);                                                  \
  template void dropout_backward<T>(const T*, std::size_t, std::uint64_t, std::uint64_t, float,    \
                                    T*, bool, cudaStream_t);                                       \
  template void bn_batch_statistics<T>(const T*, int, int, int, double*, cudaStream_t);            \
  template void bias_backward<T>(const T*, int, int, int, float*, double*, cudaStream_t);          \
  template void softmax_cross_entropy<T>(const T*, const std::int32_t*, int, int, double*, T*,     \
                                         int*, cudaStream_t);
SYNCOPT_ACT_KERNELS(float)
SYNCOPT_ACT_KERNELS(__nv_bfloat16)
#undef SYNCOPT_ACT_KERNELS
template void convert<float, __nv_bfloat16>(const float*, std::size_t, __nv_bfloat16*,
                                            cudaStream_t);
template void convert<__nv_bfloat16, float>(const __nv_bfloat16*, std::size_t, float*,
                                            cudaStream_t);

}  // namespace syncopt::cuda
