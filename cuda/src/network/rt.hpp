// The CUDA network's per-node state and what each layer kind's functions
// (kinds.hpp) are given: the node table built once (NodeRt), the per-batch
// plans (descriptors and algorithms, NodePlan), and the context of one
// forward or backward pass (Pass). Activations are NCHW.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "../handles.hpp"
#include "nn/graph.hpp"
#include "nn/walk.hpp"
#include "syncopt_cuda/api.hpp"
#include "syncopt_cuda/memory.hpp"

namespace syncopt::cuda::net {

using nn::Delivery;
using nn::LayerType;

// A tensor per example as cuDNN sees it: an image C x H x W, a vector of
// u units as u x 1 x 1 (the graph's shapes, never derived here).
struct Chw {
  int c = 1, h = 1, w = 1;
  std::size_t count() const { return static_cast<std::size_t>(c) * h * w; }
};

Chw chw_of(const std::vector<std::int64_t>& shape);

// Batch-independent state of one node, with its device scratch.
struct NodeRt {
  const nn::Node* node = nullptr;
  Chw in, out;  // input 0 and output, per example
  // conv / fc: the weight matrix [units, fan_in] and the views' offsets
  int units = 0, fan_in = 0;
  bool weight_norm = false, has_bias = false;
  std::size_t w_off = 0, g_off = 0, b_off = 0;
  DeviceBuffer<float> w_eff, dw, norm;  // weight-norm scratch
  // bf16: the weights converted for the step, and a convolution's weight
  // gradient as cuDNN gives it (bf16), before it is widened into FP32.
  DeviceBuffer<__nv_bfloat16> w16, dw16;
  FilterDesc filter;  // conv
  ConvDesc conv;
  PoolDesc pool;  // maxpool, avgpool, gap
  // batch norm: gamma and beta; the last training forward's mean and
  // 1 / sqrt(var + eps) (for its backward); the set statistics; the sums of
  // a statistics pass [2C]
  std::size_t scale_off = 0, shift_off = 0;
  TensorDesc bn_param;  // 1 x C x 1 x 1
  DeviceBuffer<float> save_mean, save_inv_var, pop_mean, pop_var;
  DeviceBuffer<double> stats_sums;
  // dropout
  std::uint64_t threshold = 0;
  float keep_scale = 1.0f;
  // The node's parameter group [p_lo, p_hi) of the flat buffer; host-pointer
  // path: parameters up (copy stream), gradient ready (compute stream),
  // gradient down (copy stream).
  bool has_params = false;
  std::size_t p_lo = 0, p_hi = 0;
  CudaEvent up, grad_ready, down;
};

// Per batch size and node: tensor descriptors (input 0, output) and the
// chosen convolution algorithms.
struct NodePlan {
  TensorDesc x, y;
  cudnnConvolutionFwdAlgo_t fwd_algo{};
  cudnnConvolutionBwdDataAlgo_t bwd_data_algo{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo{};
};

struct Plan {
  int batch = 0;
  std::vector<NodePlan> nodes;
  bool has_backward = false;
};

// What a forward pass is for: training (batch statistics, dropout), the
// statistics pass (the same, plus each batch norm's statistics), inference.
enum class Mode { kTrain, kStatistics, kInfer };

// The activations' storage type and the math the libraries may use
// (compute.precision, compute.tf32).
struct Numerics {
  bool bf16 = false;
  bool tf32 = false;  // FP32 data: TF32 tensor cores allowed
  cudnnDataType_t data() const { return bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT; }
  cudaDataType_t blas_data() const { return bf16 ? CUDA_R_16BF : CUDA_R_32F; }
  // cuDNN: tensor ops for bf16 (FP32 accumulation); FP32 strictly in FMA math,
  // or in default math (TF32 allowed) with tf32.
  cudnnMathType_t conv_math() const {
    return bf16 ? CUDNN_TENSOR_OP_MATH : (tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH);
  }
  std::size_t element_nbytes() const { return bf16 ? 2 : 4; }
};

// What a kind's setup may size: the largest bias-gradient scratch.
struct Setup {
  Numerics numerics;
  const nn::ParamLayout* layout = nullptr;
  int max_batch = 0;
  std::size_t bias_scratch = 0;  // doubles
  std::size_t view_offset(int view) const {
    return layout->views[static_cast<std::size_t>(view)].offset;
  }
};

// What a kind's planning uses: cuDNN, the options (timed or heuristic
// algorithms), a workspace that grows to the largest algorithm's need, and
// the log line of the algorithms chosen.
struct Planner {
  Numerics numerics;
  cudnnHandle_t cudnn = nullptr;
  const CudaOptions* options = nullptr;
  int batch = 0;
  std::size_t workspace_nbytes = 0;  // the largest need so far
  std::string algorithms;
  void need_workspace(std::size_t nbytes) {
    workspace_nbytes = workspace_nbytes > nbytes ? workspace_nbytes : nbytes;
  }
};

// cuBLAS and cuDNN blend a result into its destination: dst = alpha * result
// + beta * dst. A gradient's first contribution overwrites, later ones add.
inline const float kOne = 1.0f, kZero = 0.0f;
inline const float* beta_of(Delivery d) { return d == Delivery::kAccumulate ? &kOne : &kZero; }

// One forward or backward pass at parameters P (device), gradient G
// (device, backward), images x0 (device, in the activations' type); the
// network's buffers it reads. Activations and their gradients are T (float,
// or __nv_bfloat16 with Numerics::bf16): the accessors are templates.
struct Pass {
  Plan* plan = nullptr;
  Numerics numerics;
  cudnnHandle_t cudnn = nullptr;
  cublasHandle_t cublas = nullptr;
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_nbytes = 0;
  double* bias_scratch = nullptr;
  void* scratch = nullptr;  // a batch norm's unwanted dL/dimages
  int batch = 0;
  Mode mode = Mode::kTrain;
  const float* P = nullptr;
  float* G = nullptr;
  const void* x0 = nullptr;
  void* dinput = nullptr;  // dL/dimages, or null when not wanted
  std::uint64_t step_key = 0;
  const std::vector<void*>* t = nullptr;     // per node: its output
  const std::vector<void*>* dptr = nullptr;  // per node: dL/d(its output)
  const nn::GradientPlan* grads = nullptr;

  bool training() const { return mode != Mode::kInfer; }
  // Node `id`'s output (kGraphInput: the images).
  template <class T = void>
  const T* tensor(int id) const {
    return static_cast<const T*>(id == nn::kGraphInput ? x0 : (*t)[static_cast<std::size_t>(id)]);
  }
  template <class T = void>
  T* output(std::size_t j) const {
    return static_cast<T*>((*t)[j]);
  }
  template <class T = void>
  T* doutput(std::size_t j) const {
    return static_cast<T*>((*dptr)[j]);
  }
  // The gradient buffer of tensor `id` (kGraphInput: dL/dimages, null when
  // not wanted).
  template <class T = void>
  T* grad_of(int id) const {
    return static_cast<T*>(id == nn::kGraphInput ? dinput : (*dptr)[static_cast<std::size_t>(id)]);
  }
  // How node j's contribution reaches input `slot`: the plan's, except that
  // the images take none unless dL/dimages is wanted.
  Delivery delivery(const nn::Node& node, std::size_t j, std::size_t slot) const {
    if (node.inputs[slot] == nn::kGraphInput && dinput == nullptr) return Delivery::kNone;
    return grads->into[j][slot];
  }
  // The weights node r computes with, in the activations' type: w = g v /
  // ||v|| (weight norm) or w, converted to bf16 for the step (weighted.cpp).
  const void* weights(const NodeRt& r) const {
    if (numerics.bf16) return r.w16.get();
    return r.weight_norm ? r.w_eff.get() : P + r.w_off;
  }
  std::size_t in_count(const NodeRt& r) const {
    return static_cast<std::size_t>(batch) * r.in.count();
  }
  std::size_t out_count(const NodeRt& r) const {
    return static_cast<std::size_t>(batch) * r.out.count();
  }
  std::size_t nbytes(std::size_t count) const { return count * numerics.element_nbytes(); }
  // dst (=/+=) src over n elements: an add's or a flatten's gradient passed on.
  void pass_on(Delivery d, void* dst, const void* src, std::size_t n) const;
};

// Runs fn.template operator()<T>() with T the pass's activation type: the
// kinds' kernels are templates over it.
template <class Fn>
void with_type(const Numerics& numerics, Fn&& fn) {
  if (numerics.bf16) {
    fn.template operator()<__nv_bfloat16>();
  } else {
    fn.template operator()<float>();
  }
}

// Timed (cudnnFind) or heuristic convolution algorithms for node r at the
// plan's batch (algorithms.cpp); each grows the workspace it needs.
void choose_forward_algorithm(Planner& p, NodeRt& r, NodePlan& np);
void choose_backward_algorithms(Planner& p, NodeRt& r, NodePlan& np);

// cuDNN's output size for the graph's geometry must be the graph's: a check
// that both read the attributes alike, not a second derivation.
void check_output(const NodeRt& r, int oc, int oh, int ow);

}  // namespace syncopt::cuda::net
