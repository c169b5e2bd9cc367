// The CUDA network's per-node state and what each layer kind's functions
// (kinds.hpp) are given: the node table built once (NodeRt), the per-batch
// plans (descriptors and algorithms, NodePlan), and the context of one
// forward or backward pass (Pass). Activations are NCHW.
#pragma once

#include <cublas_v2.h>
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
  FilterDesc filter;                    // conv
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

// What a kind's setup may size: the largest bias-gradient scratch.
struct Setup {
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
// (device, backward), images x0 (device); the network's buffers it reads.
struct Pass {
  Plan* plan = nullptr;
  cudnnHandle_t cudnn = nullptr;
  cublasHandle_t cublas = nullptr;
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  std::size_t workspace_nbytes = 0;
  double* bias_scratch = nullptr;
  float* scratch = nullptr;  // a batch norm's unwanted dL/dimages
  int batch = 0;
  Mode mode = Mode::kTrain;
  const float* P = nullptr;
  float* G = nullptr;
  const float* x0 = nullptr;
  float* dinput = nullptr;  // dL/dimages, or null when not wanted
  std::uint64_t step_key = 0;
  const std::vector<DeviceBuffer<float>>* t = nullptr;  // per node: its output
  const std::vector<float*>* dptr = nullptr;            // per node: dL/d(its output)
  const nn::GradientPlan* grads = nullptr;

  bool training() const { return mode != Mode::kInfer; }
  // Node `id`'s output (kGraphInput: the images).
  const float* tensor(int id) const {
    return id == nn::kGraphInput ? x0 : (*t)[static_cast<std::size_t>(id)].get();
  }
  float* output(std::size_t j) const { return (*t)[j].get(); }
  float* doutput(std::size_t j) const { return (*dptr)[j]; }
  // The gradient buffer of tensor `id` (kGraphInput: dL/dimages, null when
  // not wanted).
  float* grad_of(int id) const {
    return id == nn::kGraphInput ? dinput : (*dptr)[static_cast<std::size_t>(id)];
  }
  // How node j's contribution reaches input `slot`: the plan's, except that
  // the images take none unless dL/dimages is wanted.
  Delivery delivery(const nn::Node& node, std::size_t j, std::size_t slot) const {
    if (node.inputs[slot] == nn::kGraphInput && dinput == nullptr) return Delivery::kNone;
    return grads->into[j][slot];
  }
  // The weights node r computes with: w = g v / ||v|| (weight norm) or w.
  const float* weights(const NodeRt& r) const {
    return r.weight_norm ? r.w_eff.get() : P + r.w_off;
  }
  std::size_t in_count(const NodeRt& r) const {
    return static_cast<std::size_t>(batch) * r.in.count();
  }
  std::size_t out_count(const NodeRt& r) const {
    return static_cast<std::size_t>(batch) * r.out.count();
  }
  // dst (=/+=) src over n elements: an add's or a flatten's gradient passed on.
  void pass_on(Delivery d, float* dst, const float* src, std::size_t n) const;
};

// Timed (cudnnFind) or heuristic convolution algorithms for node r at the
// plan's batch (algorithms.cpp); each grows the workspace it needs.
void choose_forward_algorithm(Planner& p, NodeRt& r, NodePlan& np);
void choose_backward_algorithms(Planner& p, NodeRt& r, NodePlan& np);

// cuDNN's output size for the graph's geometry must be the graph's: a check
// that both read the attributes alike, not a second derivation.
void check_output(const NodeRt& r, int oc, int oh, int ow);

}  // namespace syncopt::cuda::net
