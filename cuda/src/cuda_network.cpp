// CudaBackend / CudaNetwork: a model's layer graph (nn/graph.hpp: the same
// nodes, shapes, parameter views and groups the CPU backend runs, derived
// once in lib/nn) on one GPU, activations in NCHW:
// - convolution (any kernel, stride, padding; forward, backward-data,
//   backward-filter; the algorithms chosen once per batch size), max and
//   average pooling, global average pooling and batch normalisation
//   (training forward with the batch's statistics, backward, inference with
//   set statistics) through cuDNN;
// - fully connected layers through cuBLAS sgemm;
// - the kernels of kernels.cu for bias + ReLU, the bias gradient, ReLU
//   backward, the residual add, dropout (the CPU backend's masks:
//   nn/dropout.hpp), weight normalisation, the precise batch-norm statistics
//   and the softmax cross-entropy.
// A ReLU the graph fused into a conv / fc / batch norm / add runs on that
// node's output in place; its backward masks the output gradient in place
// with the stored output. The backward delivers gradients as
// syncopt_cuda/gradient_plan.hpp decides: the first contribution to a
// tensor read by several nodes overwrites its gradient, the others add
// (cuDNN / cuBLAS beta = 1), an add's lone input 0 shares the add's buffer.
//
// Two ways in:
// - train_step_device (DeviceNetwork): parameters and gradient are device
//   buffers of the caller (the CudaReplica); only the images and labels go
//   up, and the per-example losses and two flags (a bad label, and -- when
//   asked -- a non-finite gradient) come down: one host wait per step.
// - train_step / predict / set_batch_norm_statistics (nn::Network, host
//   pointers; the parameter-server workers and evaluation): the parameters
//   go up and the gradient comes down every call, so the transfers are
//   pipelined with the compute on a second (copy) stream, node by node (one
//   parameter group, nn::Graph::groups, each), ordered by events: a node's
//   parameters are staged into pinned memory and copied up while the nodes
//   before it compute, and its gradient is copied down (and unstaged by the
//   host) while the backward pass goes on below it. The host waits only for
//   the pieces.
//
// Inputs are double-buffered: call k's images and labels go through slot
// k % 2 (pinned staging, device buffers), copied up on the copy stream, so
// the upload overlaps what the compute stream still runs (the replica's
// optimiser and EMA of the previous step) and never waits for the compute
// stream to finish reading the other slot. Events order the two streams.
//
// Batch norm (docs/bn.md): training normalises with the batch's own
// statistics and keeps no running ones; set_batch_norm_statistics runs the
// given batches forward in training mode and accumulates, per channel, the
// batch means and biased variances exactly as the CPU backend does (the
// mean of the means, E[x^2] as the mean of var + mean^2, in double); predict
// normalises with those.
//
// Numerics: plain FP32 everywhere, no TF32: convolutions with
// CUDNN_FMA_MATH, cuBLAS in CUBLAS_DEFAULT_MATH (which keeps FP32 sgemm in
// FP32). The results equal the CPU backend's within float rounding. With
// CudaOptions::deterministic the convolution algorithms are picked by
// cuDNN's heuristics among the deterministic ones, without timing, and every
// other kernel is deterministic, so two runs agree bit for bit.
//
// Every host wait is bounded by CudaOptions::sync_timeout_s (sync.hpp). A
// CudaNetwork is not thread-safe.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "handles.hpp"
#include "nn/backend.hpp"
#include "nn/dropout.hpp"
#include "nn/graph.hpp"
#include "syncopt_cuda/api.hpp"
#include "syncopt_cuda/check.hpp"
#include "syncopt_cuda/gradient_plan.hpp"
#include "syncopt_cuda/kernels.hpp"
#include "syncopt_cuda/memory.hpp"
#include "syncopt_cuda/sync.hpp"

namespace syncopt::cuda {

namespace {

using nn::LayerType;

// Largest cuDNN workspace an algorithm may ask for; faster algorithms that
// want more are skipped.
constexpr std::size_t kMaxWorkspaceNbytes = std::size_t{512} << 20;

// A tensor per example as cuDNN sees it: an image C x H x W, a vector of
// u units as u x 1 x 1 (the graph's shapes, never derived here).
struct Chw {
  int c = 1, h = 1, w = 1;
  std::size_t count() const { return static_cast<std::size_t>(c) * h * w; }
};

Chw chw_of(const std::vector<std::int64_t>& shape) {
  Chw t;
  t.c = static_cast<int>(shape.at(0));
  if (shape.size() == 3) {
    t.h = static_cast<int>(shape[1]);
    t.w = static_cast<int>(shape[2]);
  }
  return t;
}

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

// One of the two input buffers (see the file comment): device images and
// labels of up to max_batch examples, their pinned staging, and the events
// that order them: `up` on the copy stream after the upload, `read` on the
// compute stream after the last kernel that reads the slot.
struct InputSlot {
  DeviceBuffer<float> x;
  DeviceBuffer<std::int32_t> labels;
  PinnedBuffer<float> h_x;
  PinnedBuffer<std::int32_t> h_labels;
  CudaEvent up, read;
};

// The per-step flags, one int each, cleared and read back with the losses.
constexpr int kBadLabel = 0;
constexpr int kNonFinite = 1;
constexpr int kFlagCount = 2;

// What a forward pass is for: training (batch statistics, dropout), the
// statistics pass (the same, plus each batch norm's statistics), inference.
enum class Mode { kTrain, kStatistics, kInfer };

// Succeeded and fits the workspace limit; with fp32_math, also reported in
// FMA or default math (a tensor-op entry was timed with TF32). The
// descriptors stay in CUDNN_FMA_MATH whatever an entry says, so the
// convolution runs in FP32 either way; the math filter only keeps the
// choice from resting on a TF32 timing.
template <class Perf>
bool usable(const Perf& p, bool fp32_math) {
  return p.status == CUDNN_STATUS_SUCCESS && p.memory <= kMaxWorkspaceNbytes &&
         (!fp32_math || p.mathType == CUDNN_FMA_MATH || p.mathType == CUDNN_DEFAULT_MATH);
}

// Timed (cudnnFind) results, fastest first: the fastest usable algorithm,
// or a deterministic one when it is within 20% of that (so that repeated
// runs agree bit for bit where it is cheap). Heuristic (cudnnGet_v7)
// results in deterministic mode: the first usable deterministic one.
// Entries in FP32 math first; any math only when there are none.
template <class Perf>
Perf choose(const Perf* perf, int returned, bool deterministic, const char* what) {
  for (const bool fp32_math : {true, false}) {
    const Perf* best = nullptr;
    for (int i = 0; i < returned && best == nullptr; ++i) {
      if (usable(perf[i], fp32_math) &&
          (!deterministic || perf[i].determinism == CUDNN_DETERMINISTIC)) {
        best = &perf[i];
      }
    }
    if (best == nullptr) continue;
    if (!deterministic && best->determinism != CUDNN_DETERMINISTIC) {
      for (int i = 0; i < returned; ++i) {
        if (usable(perf[i], fp32_math) && perf[i].determinism == CUDNN_DETERMINISTIC &&
            perf[i].time <= 1.2f * best->time) {
          return perf[i];
        }
      }
    }
    return *best;
  }
  throw InternalError(std::string("cuDNN found no usable ") +
                      (deterministic ? "deterministic " : "") + what +
                      " algorithm for this layer shape");
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// cuBLAS and cuDNN blend a result into its destination: dst = alpha * result
// + beta * dst. A gradient's first contribution overwrites, later ones add.
const float kOne = 1.0f, kZero = 0.0f;
const float* beta_of(Delivery d) { return d == Delivery::kAccumulate ? &kOne : &kZero; }

class CudaNetwork final : public DeviceNetwork {
 public:
  CudaNetwork(nn::Graph graph, int max_batch, int device, const CudaOptions& options)
      : m_graph(std::move(graph)),
        m_options(options),
        m_max_batch(checked_batch(max_batch)),
        m_device(activate(device)) {
    m_classes = static_cast<int>(m_graph.outputs);
    SYNCOPT_CHECK_CUBLAS(cublasSetStream(m_cublas.get(), m_stream.get()));
    // FP32 sgemm stays FP32 in the default mode (no TF32); said explicitly.
    SYNCOPT_CHECK_CUBLAS(cublasSetMathMode(m_cublas.get(), CUBLAS_DEFAULT_MATH));
    SYNCOPT_CHECK_CUDNN(cudnnSetStream(m_cudnn.get(), m_stream.get()));
    m_gradients = plan_gradients(m_graph, true);
    build_nodes();
    const std::size_t n = static_cast<std::size_t>(max_batch);
    const std::size_t layout_count = m_graph.layout.count;
    m_params = DeviceBuffer<float>(layout_count);
    m_h_params = PinnedBuffer<float>(layout_count);
    for (const NodeRt& r : m_nodes) m_t.emplace_back(n * r.out.count());
    const std::size_t in_per = input_per_example();
    for (InputSlot& in : m_in) {
      in.x = DeviceBuffer<float>(n * in_per);
      in.labels = DeviceBuffer<std::int32_t>(n);
      in.h_x = PinnedBuffer<float>(n * in_per);
      in.h_labels = PinnedBuffer<std::int32_t>(n);
    }
    m_loss = DeviceBuffer<double>(n);
    m_flags = DeviceBuffer<int>(kFlagCount);
    m_h_logits = PinnedBuffer<float>(n * static_cast<std::size_t>(m_classes));
    m_h_loss = PinnedBuffer<double>(n);
    m_h_flags = PinnedBuffer<int>(kFlagCount);
  }

  ~CudaNetwork() override {
    // Nothing may still run on the streams when the buffers are freed; a
    // bounded wait, and nothing thrown from here.
    try {
      (void)cudaSetDevice(m_device);
      wait_stream(m_copy.get(), m_options.sync_timeout_s, "the network's teardown");
      wait_stream(m_stream.get(), m_options.sync_timeout_s, "the network's teardown");
    } catch (...) {
    }
  }

  CudaNetwork(const CudaNetwork&) = delete;
  CudaNetwork& operator=(const CudaNetwork&) = delete;

  int max_batch() const override { return m_max_batch; }
  int device() const override { return m_device; }
  void* stream() const override { return m_stream.get(); }
  double sync_timeout_s() const override { return m_options.sync_timeout_s; }
  bool has_batch_norm() const override { return m_graph.has_batch_norm; }
  void set_dropout_key(std::optional<std::uint64_t> key) override { m_dropout_key = key; }

  // params, grad [layout.count] host; images [batch, C, H, W]; labels [batch].
  float train_step(const float* params, const float* images, const std::int32_t* labels, int batch,
                   float* grad) override {
    return host_train_step(params, images, labels, batch, grad, nullptr);
  }

  float train_step_with_input_grad(const float* params, const float* images,
                                   const std::int32_t* labels, int batch, float* grad,
                                   float* input_grad) override {
    if (input_grad == nullptr) throw InternalError("train_step_with_input_grad: null input_grad");
    return host_train_step(params, images, labels, batch, grad, input_grad);
  }

  // d_params, d_grad [layout.count] device; images, labels host.
  float train_step_device(const float* d_params, const float* images, const std::int32_t* labels,
                          int batch, float* d_grad, bool* grad_finite) override {
    if (images == nullptr || labels == nullptr || (d_params == nullptr && has_params()) ||
        (d_grad == nullptr && has_params())) {
      throw InternalError("CudaNetwork::train_step_device: null buffer");
    }
    SYNCOPT_CHECK_CUDA(cudaSetDevice(m_device));
    Plan& plan = plan_for(batch, true);
    const cudaStream_t s = m_stream.get();
    set_step_key(images, labels, batch);
    InputSlot& in = stage_inputs(images, labels, batch);
    forward(plan, Mode::kTrain, d_params, nullptr, in.x.get());
    loss_and_dlogits(batch, in.labels.get());
    backward(plan, d_params, d_grad, false, in.x.get(), nullptr);
    SYNCOPT_CHECK_CUDA(cudaEventRecord(in.read.get(), s));
    // The divergence check rides on the loss read-back: the same wait.
    if (grad_finite != nullptr)
      flag_nonfinite(d_grad, m_graph.layout.count, m_flags.get() + kNonFinite, s);
    download_losses(batch);
    return finish_loss(labels, batch, grad_finite);
  }

  // logits [batch, classes]; batch norm with the set statistics, dropout off.
  void predict(const float* params, const float* images, int batch, float* logits) override {
    if (images == nullptr || logits == nullptr || (params == nullptr && has_params())) {
      throw InternalError("CudaNetwork::predict: null buffer");
    }
    if (m_graph.has_batch_norm && !m_stats_set) {
      throw InternalError(
          "CudaNetwork::predict: a model with batch norm needs set_batch_norm_statistics() for "
          "the parameters it evaluates first");
    }
    SYNCOPT_CHECK_CUDA(cudaSetDevice(m_device));
    Plan& plan = plan_for(batch, false);
    const cudaStream_t s = m_stream.get();
    params_may_be_refilled();
    InputSlot& in = stage_inputs(images, nullptr, batch);
    forward(plan, Mode::kInfer, m_params.get(), params, in.x.get());
    SYNCOPT_CHECK_CUDA(cudaEventRecord(in.read.get(), s));
    const std::size_t n = static_cast<std::size_t>(batch) * static_cast<std::size_t>(m_classes);
    SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(m_h_logits.get(), m_t.back().get(), n * sizeof(float),
                                       cudaMemcpyDeviceToHost, s));
    wait_stream(s, m_options.sync_timeout_s, "predict");
    std::memcpy(logits, m_h_logits.get(), n * sizeof(float));
  }

  // The precise statistics of `params` (see the file comment); images
  // [batches * batch, C, H, W] on the host.
  void set_batch_norm_statistics(const float* params, const float* images, int batch,
                                 int batches) override {
    if (!m_graph.has_batch_norm) return;
    if (batches < 1 || images == nullptr || (params == nullptr && has_params())) {
      throw InternalError("set_batch_norm_statistics: no batches or a null buffer");
    }
    SYNCOPT_CHECK_CUDA(cudaSetDevice(m_device));
    Plan& plan = plan_for(batch, false);
    const cudaStream_t s = m_stream.get();
    for (NodeRt& r : m_nodes) {
      if (r.node->type != LayerType::kBatchNorm) continue;
      SYNCOPT_CHECK_CUDA(cudaMemsetAsync(r.stats_sums.get(), 0, r.stats_sums.nbytes(), s));
    }
    const std::size_t per_batch = static_cast<std::size_t>(batch) * input_per_example();
    for (int b = 0; b < batches; ++b) {
      const float* x = images + static_cast<std::size_t>(b) * per_batch;
      set_step_key(x, nullptr, batch);
      if (b == 0) params_may_be_refilled();
      InputSlot& in = stage_inputs(x, nullptr, batch);
      // The parameters go up once, with the first batch.
      forward(plan, Mode::kStatistics, m_params.get(), b == 0 ? params : nullptr, in.x.get());
      SYNCOPT_CHECK_CUDA(cudaEventRecord(in.read.get(), s));
    }
    for (NodeRt& r : m_nodes) {
      if (r.node->type != LayerType::kBatchNorm) continue;
      bn_finish_statistics(r.stats_sums.get(), r.out.c, batches, r.pop_mean.get(), r.pop_var.get(),
                           s);
    }
    wait_stream(s, m_options.sync_timeout_s, "the batch-norm statistics");
    m_stats_set = true;
  }

 private:
  static int checked_batch(int max_batch) {
    if (max_batch < 1) {
      throw ConfigError("network max batch must be >= 1, got " + std::to_string(max_batch));
    }
    return max_batch;
  }
  // Makes `device` current before the streams, events and handles below are
  // created (they belong to the device that is current at their creation).
  static int activate(int device) {
    SYNCOPT_CHECK_CUDA(cudaSetDevice(device));
    return device;
  }

  // A graph of parameter-free layers may be given null parameter and
  // gradient buffers (as the CPU backend allows).
  bool has_params() const { return m_graph.layout.count > 0; }

  std::size_t input_per_example() const {
    return static_cast<std::size_t>(m_graph.input[0] * m_graph.input[1] * m_graph.input[2]);
  }

  std::size_t view_offset(int view) const {
    return m_graph.layout.views[static_cast<std::size_t>(view)].offset;
  }

  // The node table: everything from the graph's nodes and parameter views;
  // cuDNN descriptors for the geometry the graph fixed.
  void build_nodes() {
    const std::size_t count = m_graph.nodes.size();
    if (count == 0) throw ConfigError("a model needs at least one layer");
    m_nodes.resize(count);
    std::size_t scratch = 0;
    std::size_t next_param = 0;  // the groups tile the layout in node order
    for (std::size_t j = 0; j < count; ++j) {
      NodeRt& r = m_nodes[j];
      const nn::Node& node = m_graph.nodes[j];
      const nn::LayerDesc& a = node.attr;
      r.node = &node;
      r.in = chw_of(node.in);
      r.out = chw_of(node.out);
      switch (node.type) {
        case LayerType::kConv:
        case LayerType::kFc: {
          r.units = static_cast<int>(node.units);
          r.fan_in = static_cast<int>(node.fan_in);
          r.weight_norm = a.weight_norm;
          r.has_bias = node.bias >= 0;
          r.w_off = view_offset(node.weight);
          if (r.weight_norm) {
            r.g_off = view_offset(node.gain);
            const std::size_t wn = static_cast<std::size_t>(r.units) * r.fan_in;
            r.w_eff = DeviceBuffer<float>(wn);
            r.dw = DeviceBuffer<float>(wn);
            r.norm = DeviceBuffer<float>(static_cast<std::size_t>(r.units));
          }
          if (r.has_bias) {
            r.b_off = view_offset(node.bias);
            scratch =
                std::max(scratch, bias_backward_scratch(m_max_batch, r.out.c, r.out.h * r.out.w));
          }
          if (node.type == LayerType::kConv) {
            const int k = static_cast<int>(a.kernel), st = static_cast<int>(a.stride),
                      p = static_cast<int>(a.pad);
            SYNCOPT_CHECK_CUDNN(cudnnSetFilter4dDescriptor(
                r.filter.get(), CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, r.units, r.in.c, k, k));
            SYNCOPT_CHECK_CUDNN(cudnnSetConvolution2dDescriptor(
                r.conv.get(), p, p, st, st, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
            SYNCOPT_CHECK_CUDNN(cudnnSetConvolutionMathType(r.conv.get(), CUDNN_FMA_MATH));
          }
          break;
        }
        case LayerType::kMaxPool:
        case LayerType::kAvgPool: {
          const int k = static_cast<int>(a.kernel), st = static_cast<int>(a.stride),
                    p = static_cast<int>(a.pad);
          // Max: padding never wins (as oneDNN's); average: padding counts
          // as zeros (oneDNN's pooling_avg_include_padding, PyTorch's default).
          const cudnnPoolingMode_t mode = node.type == LayerType::kMaxPool
                                              ? CUDNN_POOLING_MAX_DETERMINISTIC
                                              : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
          SYNCOPT_CHECK_CUDNN(cudnnSetPooling2dDescriptor(
              r.pool.get(), mode, CUDNN_NOT_PROPAGATE_NAN, k, k, p, p, st, st));
          break;
        }
        case LayerType::kGlobalAvgPool:
          SYNCOPT_CHECK_CUDNN(cudnnSetPooling2dDescriptor(
              r.pool.get(), CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, CUDNN_NOT_PROPAGATE_NAN,
              r.in.h, r.in.w, 0, 0, r.in.h, r.in.w));
          break;
        case LayerType::kBatchNorm: {
          r.scale_off = view_offset(node.scale);
          r.shift_off = view_offset(node.shift);
          const std::size_t c = static_cast<std::size_t>(r.out.c);
          SYNCOPT_CHECK_CUDNN(cudnnSetTensor4dDescriptor(r.bn_param.get(), CUDNN_TENSOR_NCHW,
                                                         CUDNN_DATA_FLOAT, 1, r.out.c, 1, 1));
          r.save_mean = DeviceBuffer<float>(c);
          r.save_inv_var = DeviceBuffer<float>(c);
          r.pop_mean = DeviceBuffer<float>(c);
          r.pop_var = DeviceBuffer<float>(c);
          r.stats_sums = DeviceBuffer<double>(2 * c);
          break;
        }
        case LayerType::kDropout:
          r.threshold = nn::dropout::threshold(a.rate);
          r.keep_scale = static_cast<float>(1.0 / (1.0 - a.rate));
          break;
        case LayerType::kRelu:
        case LayerType::kAdd:
        case LayerType::kFlatten:
          break;
      }
      if (node.param_count > 0) {
        r.has_params = true;
        r.p_lo = node.param_offset;
        r.p_hi = node.param_offset + node.param_count;
        if (r.p_lo != next_param) {
          throw InternalError("the parameters of node '" + node.name +
                              "' are not the next contiguous range of the layout");
        }
        next_param = r.p_hi;
      }
    }
    if (next_param != m_graph.layout.count) {
      throw InternalError("the nodes' parameters do not cover the parameter layout");
    }
    m_bias_scratch = DeviceBuffer<double>(scratch);
  }

  Plan& plan_for(int batch, bool backward) {
    if (batch < 1 || batch > m_max_batch) {
      throw InternalError("batch " + std::to_string(batch) + " is outside [1, max_batch = " +
                          std::to_string(m_max_batch) + "] of this network");
    }
    auto it = m_plans.find(batch);
    if (it == m_plans.end()) it = m_plans.emplace(batch, build_forward(batch)).first;
    Plan& plan = it->second;
    if (backward && !plan.has_backward) build_backward(plan);
    return plan;
  }

  void ensure_workspace(std::size_t nbytes) {
    if (nbytes <= m_workspace.nbytes()) return;
    // The old workspace may be in use by queued work.
    wait_stream(m_stream.get(), m_options.sync_timeout_s, "a cuDNN workspace resize");
    m_workspace = DeviceBuffer<unsigned char>();
    m_workspace = DeviceBuffer<unsigned char>(nbytes);
  }

  static void set_desc(TensorDesc& d, int batch, const Chw& t) {
    SYNCOPT_CHECK_CUDNN(cudnnSetTensor4dDescriptor(d.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                   batch, t.c, t.h, t.w));
  }

  // cuDNN's output size for the graph's geometry must be the graph's: a
  // check that both read the attributes alike, not a second derivation.
  static void check_output(const NodeRt& r, int oc, int oh, int ow) {
    if (oc != r.out.c || oh != r.out.h || ow != r.out.w) {
      throw InternalError("cuDNN's output of node '" + r.node->name + "' is " + std::to_string(oc) +
                          "x" + std::to_string(oh) + "x" + std::to_string(ow) + ", the graph's " +
                          nn::shape_string(r.node->out));
    }
  }

  Plan build_forward(int batch) {
    const auto t0 = std::chrono::steady_clock::now();
    Plan plan;
    plan.batch = batch;
    plan.nodes.resize(m_nodes.size());
    cudnnHandle_t h = m_cudnn.get();
    std::string algos;
    for (std::size_t j = 0; j < m_nodes.size(); ++j) {
      NodeRt& r = m_nodes[j];
      NodePlan& np = plan.nodes[j];
      set_desc(np.x, batch, r.in);
      set_desc(np.y, batch, r.out);
      const LayerType type = r.node->type;
      if (type == LayerType::kMaxPool || type == LayerType::kAvgPool ||
          type == LayerType::kGlobalAvgPool) {
        int n = 0, c = 0, oh = 0, ow = 0;
        SYNCOPT_CHECK_CUDNN(
            cudnnGetPooling2dForwardOutputDim(r.pool.get(), np.x.get(), &n, &c, &oh, &ow));
        check_output(r, c, oh, ow);
      }
      if (type != LayerType::kConv) continue;
      int n = 0, c = 0, oh = 0, ow = 0;
      SYNCOPT_CHECK_CUDNN(cudnnGetConvolution2dForwardOutputDim(r.conv.get(), np.x.get(),
                                                                r.filter.get(), &n, &c, &oh, &ow));
      check_output(r, c, oh, ow);
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      int returned = 0;
      if (m_options.deterministic) {
        SYNCOPT_CHECK_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(
            h, np.x.get(), r.filter.get(), r.conv.get(), np.y.get(),
            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
      } else {
        SYNCOPT_CHECK_CUDNN(cudnnFindConvolutionForwardAlgorithm(
            h, np.x.get(), r.filter.get(), r.conv.get(), np.y.get(),
            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
      }
      np.fwd_algo = choose(perf, returned, m_options.deterministic, "forward convolution").algo;
      std::size_t ws = 0;
      SYNCOPT_CHECK_CUDNN(cudnnGetConvolutionForwardWorkspaceSize(
          h, np.x.get(), r.filter.get(), r.conv.get(), np.y.get(), np.fwd_algo, &ws));
      ensure_workspace(ws);
      algos += " " + r.node->name + ".fwd=" + std::to_string(static_cast<int>(np.fwd_algo));
    }
    spdlog::debug("cuda: batch {} forward plan in {:.1f} ms ({} algorithms):{}", batch,
                  1e3 * seconds_since(t0), m_options.deterministic ? "heuristic" : "timed", algos);
    return plan;
  }

  void build_backward(Plan& plan) {
    const auto t0 = std::chrono::steady_clock::now();
    cudnnHandle_t h = m_cudnn.get();
    std::string algos;
    for (std::size_t j = 0; j < m_nodes.size(); ++j) {
      NodeRt& r = m_nodes[j];
      NodePlan& np = plan.nodes[j];
      if (r.node->type != LayerType::kConv) continue;
      cudnnConvolutionBwdFilterAlgoPerf_t fperf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      int returned = 0;
      if (m_options.deterministic) {
        SYNCOPT_CHECK_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
            h, np.x.get(), np.y.get(), r.conv.get(), r.filter.get(),
            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned, fperf));
      } else {
        SYNCOPT_CHECK_CUDNN(cudnnFindConvolutionBackwardFilterAlgorithm(
            h, np.x.get(), np.y.get(), r.conv.get(), r.filter.get(),
            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned, fperf));
      }
      np.bwd_filter_algo =
          choose(fperf, returned, m_options.deterministic, "backward-filter convolution").algo;
      std::size_t ws = 0;
      SYNCOPT_CHECK_CUDNN(cudnnGetConvolutionBackwardFilterWorkspaceSize(
          h, np.x.get(), np.y.get(), r.conv.get(), r.filter.get(), np.bwd_filter_algo, &ws));
      ensure_workspace(ws);
      algos += " " + r.node->name +
               ".bwd_filter=" + std::to_string(static_cast<int>(np.bwd_filter_algo));
      // Backward-data of a conv on the images runs only for an input
      // gradient (the tests); its algorithm is chosen anyway, once.
      cudnnConvolutionBwdDataAlgoPerf_t dperf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      if (m_options.deterministic) {
        SYNCOPT_CHECK_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(
            h, r.filter.get(), np.y.get(), r.conv.get(), np.x.get(),
            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, dperf));
      } else {
        SYNCOPT_CHECK_CUDNN(cudnnFindConvolutionBackwardDataAlgorithm(
            h, r.filter.get(), np.y.get(), r.conv.get(), np.x.get(),
            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, dperf));
      }
      np.bwd_data_algo =
          choose(dperf, returned, m_options.deterministic, "backward-data convolution").algo;
      SYNCOPT_CHECK_CUDNN(cudnnGetConvolutionBackwardDataWorkspaceSize(
          h, r.filter.get(), np.y.get(), r.conv.get(), np.x.get(), np.bwd_data_algo, &ws));
      ensure_workspace(ws);
      algos +=
          " " + r.node->name + ".bwd_data=" + std::to_string(static_cast<int>(np.bwd_data_algo));
    }
    // The gradient buffers exist once a network trains (evaluation-only
    // networks never pay for them): one per node that owns one (an add's
    // lone input 0 uses the add's), dL/d(the node's output).
    if (m_dptr.empty()) {
      const std::size_t n = static_cast<std::size_t>(m_max_batch);
      const std::size_t count = m_nodes.size();
      m_d.resize(count);
      for (std::size_t j = 0; j < count; ++j) {
        if (m_gradients.buffer[j] == static_cast<int>(j)) {
          m_d[j] = DeviceBuffer<float>(n * m_nodes[j].out.count());
        }
      }
      m_dptr.resize(count);
      for (std::size_t j = 0; j < count; ++j) {
        m_dptr[j] = m_d[static_cast<std::size_t>(m_gradients.buffer[j])].get();
      }
      // A batch norm on the images computes their gradient whether it is
      // wanted or not: it goes here.
      std::size_t scratch = 0;
      for (const NodeRt& r : m_nodes) {
        if (r.node->type == LayerType::kBatchNorm && r.node->inputs[0] == nn::kGraphInput) {
          scratch = std::max(scratch, n * r.in.count());
        }
      }
      m_scratch = DeviceBuffer<float>(scratch);
      m_grad = DeviceBuffer<float>(m_graph.layout.count);
      m_h_grad = PinnedBuffer<float>(m_graph.layout.count);
    }
    plan.has_backward = true;
    spdlog::debug("cuda: batch {} backward plan in {:.1f} ms ({} algorithms):{}", plan.batch,
                  1e3 * seconds_since(t0), m_options.deterministic ? "heuristic" : "timed", algos);
  }

  // ---- transfers -------------------------------------------------------------

  // The dropout key of a step: fixed, or a hash of the batch (the CPU
  // backend's, nn/dropout.hpp).
  void set_step_key(const float* images, const std::int32_t* labels, int batch) {
    if (!m_graph.has_dropout) return;
    m_step_key = m_dropout_key ? *m_dropout_key
                               : nn::dropout::batch_key(
                                     images, static_cast<std::size_t>(batch) * input_per_example(),
                                     labels, batch);
  }

  // The host-pointer path refills m_params on the copy stream, which must
  // not overtake what the compute stream still reads from it.
  void params_may_be_refilled() {
    SYNCOPT_CHECK_CUDA(cudaEventRecord(m_compute_done.get(), m_stream.get()));
    SYNCOPT_CHECK_CUDA(cudaStreamWaitEvent(m_copy.get(), m_compute_done.get(), 0));
  }

  // Images (and labels, unless null) into the next input slot's pinned
  // staging, up on the copy stream once the compute stream is done with
  // that slot's device buffers (two calls ago); the compute stream waits
  // for the upload. The caller records the slot's `read` event after its
  // last use of the slot on the compute stream.
  InputSlot& stage_inputs(const float* images, const std::int32_t* labels, int batch) {
    InputSlot& in = m_in[static_cast<std::size_t>(m_next_slot)];
    m_next_slot ^= 1;
    const cudaStream_t c = m_copy.get();
    // The pinned staging is free once the slot's last upload has run. Every
    // call ends with a wait for the compute stream, which waited for that
    // upload, so this query finds it done; the bounded wait is for a
    // caller that does not wait (the statistics pass, batch after batch).
    if (cudaEventQuery(in.up.get()) != cudaSuccess) {
      wait_event(in.up.get(), m_options.sync_timeout_s, "an earlier batch's upload");
    }
    const std::size_t image_nbytes =
        static_cast<std::size_t>(batch) * input_per_example() * sizeof(float);
    std::memcpy(in.h_x.get(), images, image_nbytes);
    SYNCOPT_CHECK_CUDA(cudaStreamWaitEvent(c, in.read.get(), 0));
    SYNCOPT_CHECK_CUDA(
        cudaMemcpyAsync(in.x.get(), in.h_x.get(), image_nbytes, cudaMemcpyHostToDevice, c));
    if (labels != nullptr) {
      const std::size_t label_nbytes = static_cast<std::size_t>(batch) * sizeof(std::int32_t);
      std::memcpy(in.h_labels.get(), labels, label_nbytes);
      SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(in.labels.get(), in.h_labels.get(), label_nbytes,
                                         cudaMemcpyHostToDevice, c));
    }
    SYNCOPT_CHECK_CUDA(cudaEventRecord(in.up.get(), c));
    SYNCOPT_CHECK_CUDA(cudaStreamWaitEvent(m_stream.get(), in.up.get(), 0));
    return in;
  }

  // Host-pointer path: node r's parameter group from `host` into m_params
  // on the copy stream; the compute stream waits for it.
  void upload_node(NodeRt& r, const float* host) {
    const std::size_t nbytes = (r.p_hi - r.p_lo) * sizeof(float);
    std::memcpy(m_h_params.get() + r.p_lo, host + r.p_lo, nbytes);
    SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(m_params.get() + r.p_lo, m_h_params.get() + r.p_lo, nbytes,
                                       cudaMemcpyHostToDevice, m_copy.get()));
    SYNCOPT_CHECK_CUDA(cudaEventRecord(r.up.get(), m_copy.get()));
    SYNCOPT_CHECK_CUDA(cudaStreamWaitEvent(m_stream.get(), r.up.get(), 0));
  }

  // Host-pointer path: once node r's gradient group is complete on the
  // compute stream, down into pinned staging on the copy stream.
  void download_node(NodeRt& r) {
    const std::size_t nbytes = (r.p_hi - r.p_lo) * sizeof(float);
    SYNCOPT_CHECK_CUDA(cudaEventRecord(r.grad_ready.get(), m_stream.get()));
    SYNCOPT_CHECK_CUDA(cudaStreamWaitEvent(m_copy.get(), r.grad_ready.get(), 0));
    SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(m_h_grad.get() + r.p_lo, m_grad.get() + r.p_lo, nbytes,
                                       cudaMemcpyDeviceToHost, m_copy.get()));
    SYNCOPT_CHECK_CUDA(cudaEventRecord(r.down.get(), m_copy.get()));
  }

  // train_step with host pointers (input_grad: also dL/dimages, else null).
  float host_train_step(const float* params, const float* images, const std::int32_t* labels,
                        int batch, float* grad, float* input_grad) {
    if (images == nullptr || labels == nullptr ||
        ((params == nullptr || grad == nullptr) && has_params())) {
      throw InternalError("CudaNetwork::train_step: null buffer");
    }
    SYNCOPT_CHECK_CUDA(cudaSetDevice(m_device));
    Plan& plan = plan_for(batch, true);
    const cudaStream_t s = m_stream.get();
    if (input_grad != nullptr && m_dinput.count() == 0) {
      const std::size_t cap = static_cast<std::size_t>(m_max_batch) * input_per_example();
      m_dinput = DeviceBuffer<float>(cap);
      m_h_dinput = PinnedBuffer<float>(cap);
    }
    set_step_key(images, labels, batch);
    params_may_be_refilled();
    InputSlot& in = stage_inputs(images, labels, batch);
    forward(plan, Mode::kTrain, m_params.get(), params, in.x.get());
    loss_and_dlogits(batch, in.labels.get());
    backward(plan, m_params.get(), m_grad.get(), true, in.x.get(),
             input_grad != nullptr ? m_dinput.get() : nullptr);
    SYNCOPT_CHECK_CUDA(cudaEventRecord(in.read.get(), s));
    const std::size_t in_count = static_cast<std::size_t>(batch) * input_per_example();
    if (input_grad != nullptr) {  // down with the losses, under the same wait
      SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(m_h_dinput.get(), m_dinput.get(), in_count * sizeof(float),
                                         cudaMemcpyDeviceToHost, s));
    }
    download_losses(batch);
    // Unstage each node's gradient as soon as it is down, last node first
    // (the order the backward pass finishes them).
    for (std::size_t k = m_nodes.size(); k-- > 0;) {
      const NodeRt& r = m_nodes[k];
      if (!r.has_params) continue;
      wait_event(r.down.get(), m_options.sync_timeout_s,
                 "the gradient download of " + r.node->name);
      std::memcpy(grad + r.p_lo, m_h_grad.get() + r.p_lo, (r.p_hi - r.p_lo) * sizeof(float));
    }
    const float loss = finish_loss(labels, batch, nullptr);
    if (input_grad != nullptr) {
      std::memcpy(input_grad, m_h_dinput.get(), in_count * sizeof(float));
    }
    return loss;
  }

  // Softmax cross-entropy of the logits: per-example losses and dL/dlogits.
  // Clears the flags (a bad label; a non-finite gradient) for this step.
  void loss_and_dlogits(int batch, const std::int32_t* d_labels) {
    const cudaStream_t s = m_stream.get();
    SYNCOPT_CHECK_CUDA(cudaMemsetAsync(m_flags.get(), 0, m_flags.nbytes(), s));
    softmax_cross_entropy(m_t.back().get(), d_labels, batch, m_classes, m_loss.get(), m_dptr.back(),
                          m_flags.get() + kBadLabel, s);
  }

  void download_losses(int batch) {
    const cudaStream_t s = m_stream.get();
    SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(m_h_loss.get(), m_loss.get(),
                                       static_cast<std::size_t>(batch) * sizeof(double),
                                       cudaMemcpyDeviceToHost, s));
    SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(m_h_flags.get(), m_flags.get(), m_flags.nbytes(),
                                       cudaMemcpyDeviceToHost, s));
  }

  // The step's one host wait; then the mean loss, summed in example order,
  // and (grad_finite non-null) whether the gradient was finite.
  float finish_loss(const std::int32_t* labels, int batch, bool* grad_finite) {
    wait_stream(m_stream.get(), m_options.sync_timeout_s, "a training step");
    if (m_h_flags.get()[kBadLabel] != 0) throw_bad_label(labels, batch);
    if (grad_finite != nullptr) *grad_finite = m_h_flags.get()[kNonFinite] == 0;
    double total = 0.0;
    for (int r = 0; r < batch; ++r) total += m_h_loss.get()[r];
    return static_cast<float>(total / batch);
  }

  // ---- the passes ------------------------------------------------------------

  // Node `id`'s output (kGraphInput: the images, x0).
  const float* tensor(int id, const float* x0) const {
    return id == nn::kGraphInput ? x0 : m_t[static_cast<std::size_t>(id)].get();
  }

  // The weights node r computes with: w = g v / ||v|| (weight norm) or w.
  const float* weights(const NodeRt& r, const float* P) const {
    return r.weight_norm ? r.w_eff.get() : P + r.w_off;
  }

  // Forward pass at parameters P (device). host_params non-null: the
  // host-pointer path, which uploads each node's parameters from there into
  // P (= m_params) just before the node runs. x0: the images [batch, C, H,
  // W] on the device (an input slot's).
  void forward(Plan& plan, Mode mode, const float* P, const float* host_params, const float* x0) {
    const cudaStream_t s = m_stream.get();
    const int n = plan.batch;
    const bool training = mode != Mode::kInfer;
    for (std::size_t j = 0; j < m_nodes.size(); ++j) {
      NodeRt& r = m_nodes[j];
      const nn::Node& node = *r.node;
      NodePlan& np = plan.nodes[j];
      const float* x = tensor(node.inputs[0], x0);
      float* y = m_t[j].get();
      const std::size_t in_count = static_cast<std::size_t>(n) * r.in.count();
      const std::size_t out_count = static_cast<std::size_t>(n) * r.out.count();
      if (r.has_params && host_params != nullptr) upload_node(r, host_params);
      if (r.weight_norm) {
        weight_norm_forward(P + r.w_off, P + r.g_off, r.units, r.fan_in, r.w_eff.get(),
                            r.norm.get(), s);
      }
      switch (node.type) {
        case LayerType::kConv:
          SYNCOPT_CHECK_CUDNN(cudnnConvolutionForward(
              m_cudnn.get(), &kOne, np.x.get(), x, r.filter.get(), weights(r, P), r.conv.get(),
              np.fwd_algo, m_workspace.get(), m_workspace.nbytes(), &kZero, np.y.get(), y));
          if (r.has_bias || node.relu) {
            bias_act_forward(y, r.has_bias ? P + r.b_off : nullptr, n, r.out.c, r.out.h * r.out.w,
                             node.relu, s);
          }
          break;
        case LayerType::kFc:
          // Row-major y [n, out] = x [n, in] w[out, in]^T, i.e. column-major
          // y^T (out x n) = op_T(w as in x out) * x^T (in x n).
          SYNCOPT_CHECK_CUBLAS(cublasSgemm(m_cublas.get(), CUBLAS_OP_T, CUBLAS_OP_N, r.units, n,
                                           r.fan_in, &kOne, weights(r, P), r.fan_in, x, r.fan_in,
                                           &kZero, y, r.units));
          if (r.has_bias || node.relu) {
            bias_act_forward(y, r.has_bias ? P + r.b_off : nullptr, n, r.units, 1, node.relu, s);
          }
          break;
        case LayerType::kBatchNorm:
          if (training) {
            // Batch statistics; no running averages (null), the batch's mean
            // and inverse deviation saved for the backward.
            SYNCOPT_CHECK_CUDNN(cudnnBatchNormalizationForwardTraining(
                m_cudnn.get(), CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, np.x.get(), x, np.y.get(), y,
                r.bn_param.get(), P + r.scale_off, P + r.shift_off, 1.0, nullptr, nullptr,
                node.attr.eps, r.save_mean.get(), r.save_inv_var.get()));
            if (mode == Mode::kStatistics) {
              bn_batch_statistics(x, n, r.in.c, r.in.h * r.in.w, r.stats_sums.get(), s);
            }
          } else {
            SYNCOPT_CHECK_CUDNN(cudnnBatchNormalizationForwardInference(
                m_cudnn.get(), CUDNN_BATCHNORM_SPATIAL, &kOne, &kZero, np.x.get(), x, np.y.get(), y,
                r.bn_param.get(), P + r.scale_off, P + r.shift_off, r.pop_mean.get(),
                r.pop_var.get(), node.attr.eps));
          }
          if (node.relu) bias_act_forward(y, nullptr, n, r.out.c, r.out.h * r.out.w, true, s);
          break;
        case LayerType::kRelu:
          SYNCOPT_CHECK_CUDA(
              cudaMemcpyAsync(y, x, in_count * sizeof(float), cudaMemcpyDeviceToDevice, s));
          bias_act_forward(y, nullptr, n, r.out.c, r.out.h * r.out.w, true, s);
          break;
        case LayerType::kAdd:
          add_act_forward(x, tensor(node.inputs[1], x0), out_count, node.relu, y, s);
          break;
        case LayerType::kMaxPool:
        case LayerType::kAvgPool:
        case LayerType::kGlobalAvgPool:
          SYNCOPT_CHECK_CUDNN(cudnnPoolingForward(m_cudnn.get(), r.pool.get(), &kOne, np.x.get(), x,
                                                  &kZero, np.y.get(), y));
          break;
        case LayerType::kDropout:
          if (training) {
            dropout_forward(x, out_count, nn::dropout::node_key(m_step_key, j), r.threshold,
                            r.keep_scale, y, s);
          } else {
            SYNCOPT_CHECK_CUDA(
                cudaMemcpyAsync(y, x, out_count * sizeof(float), cudaMemcpyDeviceToDevice, s));
          }
          break;
        case LayerType::kFlatten:  // NCHW is already the flattened order
          SYNCOPT_CHECK_CUDA(
              cudaMemcpyAsync(y, x, out_count * sizeof(float), cudaMemcpyDeviceToDevice, s));
          break;
      }
    }
  }

  // The gradient buffer of tensor `id` (kGraphInput: dL/dimages, null when
  // not wanted).
  float* grad_of(int id, float* dinput) const {
    return id == nn::kGraphInput ? dinput : m_dptr[static_cast<std::size_t>(id)];
  }

  // How node j's contribution reaches input `slot`: the plan's, except that
  // the images take none unless dL/dimages is wanted.
  Delivery delivery(std::size_t j, std::size_t slot, const float* dinput) const {
    const int id = m_graph.nodes[j].inputs[slot];
    if (id == nn::kGraphInput && dinput == nullptr) return Delivery::kNone;
    return m_gradients.into[j][slot];
  }

  // dst (=/+=) src over n elements: an add's or a flatten's gradient passed on.
  void pass_on(Delivery d, float* dst, const float* src, std::size_t n) {
    const cudaStream_t s = m_stream.get();
    if (d == Delivery::kWrite) {
      SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, s));
    } else if (d == Delivery::kAccumulate) {
      accumulate(dst, src, n, s);
    }
  }

  // Backward pass at parameters P; expects dL/dlogits in the last node's
  // gradient; writes the gradient G (device). download: the host-pointer
  // path (G = m_grad), which copies each node's gradient group down once it
  // is complete. dinput: dL/dimages [batch, C, H, W] on the device, or null.
  void backward(Plan& plan, const float* P, float* G, bool download, const float* x0,
                float* dinput) {
    const cudaStream_t s = m_stream.get();
    const int n = plan.batch;
    for (std::size_t j = m_nodes.size(); j-- > 0;) {
      NodeRt& r = m_nodes[j];
      const nn::Node& node = *r.node;
      NodePlan& np = plan.nodes[j];
      const float* x = tensor(node.inputs[0], x0);
      const float* y = m_t[j].get();
      float* dy = m_dptr[j];
      float* dx = grad_of(node.inputs[0], dinput);
      const Delivery d0 = delivery(j, 0, dinput);
      const std::size_t in_count = static_cast<std::size_t>(n) * r.in.count();
      const std::size_t out_count = static_cast<std::size_t>(n) * r.out.count();
      if (node.relu) relu_backward(y, dy, out_count, dy, s);
      switch (node.type) {
        case LayerType::kConv:
        case LayerType::kFc: {
          if (r.has_bias) {
            bias_backward(dy, n, r.out.c, r.out.h * r.out.w, G + r.b_off, m_bias_scratch.get(), s);
          }
          float* dw = r.weight_norm ? r.dw.get() : G + r.w_off;
          if (node.type == LayerType::kConv) {
            SYNCOPT_CHECK_CUDNN(
                cudnnConvolutionBackwardFilter(m_cudnn.get(), &kOne, np.x.get(), x, np.y.get(), dy,
                                               r.conv.get(), np.bwd_filter_algo, m_workspace.get(),
                                               m_workspace.nbytes(), &kZero, r.filter.get(), dw));
          } else {
            // Row-major dw [out, in] = dy^T x, i.e. column-major
            // dw^T (in x out) = x^T (in x n) * op_T(dy^T as out x n).
            SYNCOPT_CHECK_CUBLAS(cublasSgemm(m_cublas.get(), CUBLAS_OP_N, CUBLAS_OP_T, r.fan_in,
                                             r.units, n, &kOne, x, r.fan_in, dy, r.units, &kZero,
                                             dw, r.fan_in));
          }
          if (r.weight_norm) {
            weight_norm_backward(r.dw.get(), P + r.w_off, P + r.g_off, r.norm.get(), r.units,
                                 r.fan_in, G + r.w_off, G + r.g_off, s);
          }
          if (download) download_node(r);
          if (d0 == Delivery::kNone) break;
          if (node.type == LayerType::kConv) {
            SYNCOPT_CHECK_CUDNN(cudnnConvolutionBackwardData(
                m_cudnn.get(), &kOne, r.filter.get(), weights(r, P), np.y.get(), dy, r.conv.get(),
                np.bwd_data_algo, m_workspace.get(), m_workspace.nbytes(), beta_of(d0), np.x.get(),
                dx));
          } else {
            // Row-major dx [n, in] = dy [n, out] w [out, in], i.e. column-major
            // dx^T (in x n) = (w as in x out) * dy^T (out x n).
            SYNCOPT_CHECK_CUBLAS(cublasSgemm(m_cublas.get(), CUBLAS_OP_N, CUBLAS_OP_N, r.fan_in, n,
                                             r.units, &kOne, weights(r, P), r.fan_in, dy, r.units,
                                             beta_of(d0), dx, r.fan_in));
          }
          break;
        }
        case LayerType::kBatchNorm:
          // dL/dx is computed in any case: into the scratch when unwanted
          // (a batch norm on the images).
          SYNCOPT_CHECK_CUDNN(cudnnBatchNormalizationBackward(
              m_cudnn.get(), CUDNN_BATCHNORM_SPATIAL, &kOne, beta_of(d0), &kOne, &kZero, np.x.get(),
              x, np.y.get(), dy, np.x.get(), d0 == Delivery::kNone ? m_scratch.get() : dx,
              r.bn_param.get(), P + r.scale_off, G + r.scale_off, G + r.shift_off, node.attr.eps,
              r.save_mean.get(), r.save_inv_var.get()));
          if (download) download_node(r);
          break;
        case LayerType::kRelu:
          if (d0 != Delivery::kNone) {
            relu_backward(y, dy, out_count, dx, s, d0 == Delivery::kAccumulate);
          }
          break;
        case LayerType::kAdd:
          // The add's gradient is each input's (after its fused ReLU's mask,
          // above); a kShared input 0 holds it already.
          pass_on(d0, dx, dy, out_count);
          pass_on(delivery(j, 1, dinput), grad_of(node.inputs[1], dinput), dy, out_count);
          break;
        case LayerType::kMaxPool:
        case LayerType::kAvgPool:
        case LayerType::kGlobalAvgPool: {
          if (d0 == Delivery::kNone) break;
          const float* beta = beta_of(d0);
          // Input positions in no window get no gradient: zero them first
          // when this contribution overwrites (then cuDNN adds to zeros).
          const nn::LayerDesc& a = node.attr;
          const bool covers_all =
              node.type == LayerType::kGlobalAvgPool ||
              (a.stride <= a.kernel && (r.in.h + 2 * a.pad - a.kernel) % a.stride == 0 &&
               (r.in.w + 2 * a.pad - a.kernel) % a.stride == 0);
          if (d0 == Delivery::kWrite && !covers_all) {
            SYNCOPT_CHECK_CUDA(cudaMemsetAsync(dx, 0, in_count * sizeof(float), s));
            beta = &kOne;
          }
          SYNCOPT_CHECK_CUDNN(cudnnPoolingBackward(m_cudnn.get(), r.pool.get(), &kOne, np.y.get(),
                                                   y, np.y.get(), dy, np.x.get(), x, beta,
                                                   np.x.get(), dx));
          break;
        }
        case LayerType::kDropout:
          if (d0 != Delivery::kNone) {
            dropout_backward(dy, out_count, nn::dropout::node_key(m_step_key, j), r.threshold,
                             r.keep_scale, dx, d0 == Delivery::kAccumulate, s);
          }
          break;
        case LayerType::kFlatten:
          pass_on(d0, dx, dy, out_count);
          break;
      }
    }
  }

  [[noreturn]] void throw_bad_label(const std::int32_t* labels, int batch) const {
    for (int r = 0; r < batch; ++r) {
      if (labels[r] < 0 || labels[r] >= m_classes) {
        throw DataError("label " + std::to_string(labels[r]) + " of example " + std::to_string(r) +
                        " is outside [0, " + std::to_string(m_classes) +
                        "); the dataset's class count does not match the model");
      }
    }
    throw InternalError(
        "the GPU saw a label outside [0, classes) that the host copy does not have");
  }

  nn::Graph m_graph;
  CudaOptions m_options;
  int m_max_batch = 0;
  int m_device = 0;  // initialised (and made current) before the members below
  int m_classes = 0;
  GradientPlan m_gradients;
  std::optional<std::uint64_t> m_dropout_key;
  std::uint64_t m_step_key = 0;
  bool m_stats_set = false;
  // Declared before the buffers so that they are destroyed after them.
  CudaStream m_stream;       // all compute
  CudaStream m_copy;         // the host-pointer path's transfers
  CudaEvent m_compute_done;  // the host-pointer path: m_params free for the next upload
  CublasHandle m_cublas;
  CudnnHandle m_cudnn;
  std::vector<NodeRt> m_nodes;
  std::map<int, Plan> m_plans;
  DeviceBuffer<unsigned char> m_workspace;
  DeviceBuffer<double> m_bias_scratch;
  DeviceBuffer<float> m_params, m_grad;  // the host-pointer path's device copies
  // m_t[j]: node j's output (the last: the logits). m_d[j]: dL/d(node j's
  // output) where node j owns its gradient buffer; m_dptr[j] where it is.
  std::vector<DeviceBuffer<float>> m_t, m_d;
  std::vector<float*> m_dptr;
  DeviceBuffer<float> m_scratch;  // a batch norm's unwanted dL/dimages
  DeviceBuffer<float> m_dinput;   // dL/dimages (train_step_with_input_grad)
  std::array<InputSlot, 2> m_in;
  int m_next_slot = 0;
  DeviceBuffer<double> m_loss;
  DeviceBuffer<int> m_flags;  // [kFlagCount]: kBadLabel, kNonFinite
  PinnedBuffer<float> m_h_params, m_h_grad, m_h_logits, m_h_dinput;
  PinnedBuffer<double> m_h_loss;
  PinnedBuffer<int> m_h_flags;
};

class CudaBackend final : public nn::Backend {
 public:
  CudaBackend(int device, const CudaOptions& options) : m_device(device), m_options(options) {}
  std::string name() const override { return "cuda"; }
  std::unique_ptr<nn::Network> make_network(const nn::ModelSpec& spec, int max_batch) override {
    return make_cuda_network(nn::model_graph(spec), max_batch, m_device, m_options);
  }

 private:
  int m_device;
  CudaOptions m_options;
};

}  // namespace

std::unique_ptr<DeviceNetwork> make_cuda_network(const nn::Graph& graph, int max_batch, int device,
                                                 const CudaOptions& options) {
  return std::make_unique<CudaNetwork>(graph, max_batch, device, options);
}

std::unique_ptr<nn::Backend> make_cuda_backend(int threads, int device,
                                               const CudaOptions& options) {
  const int n = device_count();
  if (n == 0) {
    throw ConfigError("compute.backend = \"cuda\" but this process sees no CUDA device (" +
                      probe_devices().message +
                      "); run on a GPU node or use compute.backend = \"cpu\"");
  }
  if (device < 0 || device >= n) {
    throw ConfigError("CUDA device " + std::to_string(device) +
                      " does not exist; this process sees " + std::to_string(n) + " device(s)");
  }
  (void)threads;  // the host side of a step is one thread
  return std::make_unique<CudaBackend>(device, options);
}

}  // namespace syncopt::cuda
