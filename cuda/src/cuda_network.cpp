// CudaBackend / CudaNetwork: the layer list of lib/nn (nn::net_spec, the
// same parameter layout and order as the CPU backend) run on one GPU:
// cuDNN for 3x3 convolutions (forward, backward-data, backward-filter; the
// algorithms chosen once per batch size) and 2x2 max-pooling, cuBLAS sgemm
// for the fully connected layers, and the kernels of kernels.cu for bias +
// ReLU, the bias gradient, weight normalisation and the softmax
// cross-entropy.
//
// Two ways in:
// - train_step_device (DeviceNetwork): parameters and gradient are device
//   buffers of the caller (the CudaReplica); only the images and labels go
//   up, and the per-example losses and two flags (a bad label, and -- when
//   asked -- a non-finite gradient) come down: one host wait per step.
// - train_step / predict (nn::Network, host pointers; the parameter-server
//   workers and evaluation): the parameters go up and the gradient comes
//   down every call, so the transfers are pipelined with the compute on a
//   second (copy) stream, layer by layer, ordered by events: layer i's
//   parameters are staged into pinned memory and copied up while layer i-1
//   computes, and layer k's gradient is copied down (and unstaged by the
//   host) while the backward pass goes on below layer k. The host waits
//   only for the last piece.
//
// Inputs are double-buffered: call k's images and labels go through slot
// k % 2 (pinned staging, device buffers), copied up on the copy stream, so
// the upload overlaps what the compute stream still runs (the replica's
// optimiser and EMA of the previous step) and never waits for the compute
// stream to finish reading the other slot. Events order the two streams.
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
#include <string>
#include <vector>

#include "common/error.hpp"
#include "handles.hpp"
#include "nn/backend.hpp"
#include "syncopt_cuda/api.hpp"
#include "syncopt_cuda/check.hpp"
#include "syncopt_cuda/kernels.hpp"
#include "syncopt_cuda/memory.hpp"
#include "syncopt_cuda/sync.hpp"

namespace syncopt::cuda {

namespace {

using nn::LayerKind;

// Largest cuDNN workspace an algorithm may ask for; faster algorithms that
// want more are skipped.
constexpr std::size_t kMaxWorkspaceNbytes = std::size_t{512} << 20;

// Batch-independent description of one layer, with its device scratch.
struct Layer {
  nn::LayerSpec spec;
  int in_c = 0, in_h = 1, in_w = 1;     // input per example ({features, 1, 1} after an fc)
  int out_c = 0, out_h = 1, out_w = 1;  // output per example
  std::size_t in_per = 0, out_per = 0;  // floats per example
  bool has_params = false;
  int units = 0, fan_in = 0;
  std::size_t w_off = 0, g_off = 0, b_off = 0;  // "<name>.v" (or ".w"), ".g", ".b"
  std::size_t p_lo = 0, p_hi = 0;               // all of the layer's parameters
  DeviceBuffer<float> w_eff, dw, norm;          // weight-norm scratch
  FilterDesc filter;                            // conv only
  ConvDesc conv;
  PoolDesc pool;
  // Host-pointer path: parameters up (copy stream), gradient ready (compute
  // stream), gradient down (copy stream).
  CudaEvent up, grad_ready, down;
};

// Per batch size: tensor descriptors and the chosen conv algorithms.
struct LayerPlan {
  TensorDesc x, y;  // NCHW [batch, in_c, in_h, in_w] and [batch, out_c, out_h, out_w]
  cudnnConvolutionFwdAlgo_t fwd_algo{};
  cudnnConvolutionBwdDataAlgo_t bwd_data_algo{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo{};
};

struct Plan {
  int batch = 0;
  std::vector<LayerPlan> layers;
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

class CudaNetwork final : public DeviceNetwork {
 public:
  CudaNetwork(nn::NetSpec net, int max_batch, int device, const CudaOptions& options)
      : m_net(std::move(net)),
        m_options(options),
        m_max_batch(checked_batch(max_batch)),
        m_device(activate(device)) {
    m_layout = nn::param_layout(m_net);
    m_classes = static_cast<int>(nn::output_count(m_net));
    SYNCOPT_CHECK_CUBLAS(cublasSetStream(m_cublas.get(), m_stream.get()));
    // FP32 sgemm stays FP32 in the default mode (no TF32); said explicitly.
    SYNCOPT_CHECK_CUBLAS(cublasSetMathMode(m_cublas.get(), CUBLAS_DEFAULT_MATH));
    SYNCOPT_CHECK_CUDNN(cudnnSetStream(m_cudnn.get(), m_stream.get()));
    build_layers();
    const std::size_t n = static_cast<std::size_t>(max_batch);
    m_params = DeviceBuffer<float>(m_layout.count);
    m_h_params = PinnedBuffer<float>(m_layout.count);
    m_t.emplace_back();  // the input is an InputSlot's
    for (const Layer& l : m_layers) m_t.emplace_back(n * l.out_per);
    for (InputSlot& in : m_in) {
      in.x = DeviceBuffer<float>(n * m_layers.front().in_per);
      in.labels = DeviceBuffer<std::int32_t>(n);
      in.h_x = PinnedBuffer<float>(n * m_layers.front().in_per);
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

  // params, grad [layout.count] host; images [batch, C, H, W]; labels [batch].
  float train_step(const float* params, const float* images, const std::int32_t* labels, int batch,
                   float* grad) override {
    if (images == nullptr || labels == nullptr || params == nullptr || grad == nullptr) {
      throw InternalError("CudaNetwork::train_step: null buffer");
    }
    SYNCOPT_CHECK_CUDA(cudaSetDevice(m_device));
    Plan& plan = plan_for(batch, true);
    const cudaStream_t s = m_stream.get(), c = m_copy.get();
    // The copy stream refills m_params, which the compute stream may still read.
    SYNCOPT_CHECK_CUDA(cudaEventRecord(m_compute_done.get(), s));
    SYNCOPT_CHECK_CUDA(cudaStreamWaitEvent(c, m_compute_done.get(), 0));
    InputSlot& in = stage_inputs(images, labels, batch);
    forward(plan, m_params.get(), params, in.x.get());
    loss_and_dlogits(batch, in.labels.get());
    backward(plan, m_params.get(), m_grad.get(), true, in.x.get());
    SYNCOPT_CHECK_CUDA(cudaEventRecord(in.read.get(), s));
    download_losses(batch);
    // Unstage each layer's gradient as soon as it is down, last layer first
    // (the order the backward pass finishes them).
    for (std::size_t k = m_layers.size(); k-- > 0;) {
      const Layer& l = m_layers[k];
      if (!l.has_params) continue;
      wait_event(l.down.get(), m_options.sync_timeout_s, "the gradient download of " + l.spec.name);
      std::memcpy(grad + l.p_lo, m_h_grad.get() + l.p_lo, (l.p_hi - l.p_lo) * sizeof(float));
    }
    return finish_loss(labels, batch, nullptr);
  }

  // d_params, d_grad [layout.count] device; images, labels host.
  float train_step_device(const float* d_params, const float* images, const std::int32_t* labels,
                          int batch, float* d_grad, bool* grad_finite) override {
    if (images == nullptr || labels == nullptr || d_params == nullptr || d_grad == nullptr) {
      throw InternalError("CudaNetwork::train_step_device: null buffer");
    }
    SYNCOPT_CHECK_CUDA(cudaSetDevice(m_device));
    Plan& plan = plan_for(batch, true);
    const cudaStream_t s = m_stream.get();
    InputSlot& in = stage_inputs(images, labels, batch);
    forward(plan, d_params, nullptr, in.x.get());
    loss_and_dlogits(batch, in.labels.get());
    backward(plan, d_params, d_grad, false, in.x.get());
    SYNCOPT_CHECK_CUDA(cudaEventRecord(in.read.get(), s));
    // The divergence check rides on the loss read-back: the same wait.
    if (grad_finite != nullptr)
      flag_nonfinite(d_grad, m_layout.count, m_flags.get() + kNonFinite, s);
    download_losses(batch);
    return finish_loss(labels, batch, grad_finite);
  }

  // logits [batch, classes].
  void predict(const float* params, const float* images, int batch, float* logits) override {
    if (images == nullptr || logits == nullptr || params == nullptr) {
      throw InternalError("CudaNetwork::predict: null buffer");
    }
    SYNCOPT_CHECK_CUDA(cudaSetDevice(m_device));
    Plan& plan = plan_for(batch, false);
    const cudaStream_t s = m_stream.get(), c = m_copy.get();
    SYNCOPT_CHECK_CUDA(cudaEventRecord(m_compute_done.get(), s));
    SYNCOPT_CHECK_CUDA(cudaStreamWaitEvent(c, m_compute_done.get(), 0));
    InputSlot& in = stage_inputs(images, nullptr, batch);
    forward(plan, m_params.get(), params, in.x.get());
    SYNCOPT_CHECK_CUDA(cudaEventRecord(in.read.get(), s));
    const std::size_t n = static_cast<std::size_t>(batch) * static_cast<std::size_t>(m_classes);
    SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(m_h_logits.get(), m_t.back().get(), n * sizeof(float),
                                       cudaMemcpyDeviceToHost, s));
    wait_stream(s, m_options.sync_timeout_s, "predict");
    std::memcpy(logits, m_h_logits.get(), n * sizeof(float));
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

  void build_layers() {
    const auto shapes = nn::layer_output_shapes(m_net);
    std::vector<std::int64_t> in = {m_net.channels, m_net.height, m_net.width};
    m_layers.resize(m_net.layers.size());
    if (m_layers.empty()) throw ConfigError("a model needs at least one layer");
    std::size_t next_param = 0;  // the layers' parameter ranges tile the layout in order
    std::size_t scratch = 0;
    for (std::size_t i = 0; i < m_net.layers.size(); ++i) {
      Layer& l = m_layers[i];
      l.spec = m_net.layers[i];
      const auto as3 = [](const std::vector<std::int64_t>& s, int& c, int& h, int& w) {
        c = static_cast<int>(s[0]);
        h = s.size() == 3 ? static_cast<int>(s[1]) : 1;
        w = s.size() == 3 ? static_cast<int>(s[2]) : 1;
      };
      as3(in, l.in_c, l.in_h, l.in_w);
      as3(shapes[i], l.out_c, l.out_h, l.out_w);
      l.in_per = static_cast<std::size_t>(l.in_c) * l.in_h * l.in_w;
      l.out_per = static_cast<std::size_t>(l.out_c) * l.out_h * l.out_w;
      const std::string& name = l.spec.name;
      switch (l.spec.kind) {
        case LayerKind::kConv3x3:
          if (in.size() != 3) throw ConfigError("conv layer '" + name + "' needs an image input");
          l.fan_in = l.in_c * 9;
          SYNCOPT_CHECK_CUDNN(cudnnSetFilter4dDescriptor(l.filter.get(), CUDNN_DATA_FLOAT,
                                                         CUDNN_TENSOR_NCHW, l.out_c, l.in_c, 3, 3));
          SYNCOPT_CHECK_CUDNN(cudnnSetConvolution2dDescriptor(
              l.conv.get(), 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
          SYNCOPT_CHECK_CUDNN(cudnnSetConvolutionMathType(l.conv.get(), CUDNN_FMA_MATH));
          break;
        case LayerKind::kFc:
          l.fan_in = static_cast<int>(l.in_per);
          break;
        case LayerKind::kMaxPool2x2:
          SYNCOPT_CHECK_CUDNN(
              cudnnSetPooling2dDescriptor(l.pool.get(), CUDNN_POOLING_MAX_DETERMINISTIC,
                                          CUDNN_NOT_PROPAGATE_NAN, 2, 2, 0, 0, 2, 2));
          break;
        case LayerKind::kRelu:
          break;
      }
      if (l.spec.kind == LayerKind::kConv3x3 || l.spec.kind == LayerKind::kFc) {
        l.has_params = true;
        scratch = std::max(scratch, bias_backward_scratch(m_max_batch, l.out_c, l.out_h * l.out_w));
        l.units = l.spec.out;
        if (m_net.weight_norm) {
          l.w_off = m_layout.find(name + ".v").offset;
          l.g_off = m_layout.find(name + ".g").offset;
          const std::size_t wn = static_cast<std::size_t>(l.units) * l.fan_in;
          l.w_eff = DeviceBuffer<float>(wn);
          l.dw = DeviceBuffer<float>(wn);
          l.norm = DeviceBuffer<float>(static_cast<std::size_t>(l.units));
        } else {
          l.w_off = m_layout.find(name + ".w").offset;
        }
        l.b_off = m_layout.find(name + ".b").offset;
        l.p_lo = l.w_off;
        l.p_hi = l.b_off + static_cast<std::size_t>(l.units);
        if (l.p_lo != next_param || l.p_hi <= l.p_lo) {
          throw InternalError("the parameters of layer '" + name +
                              "' are not the next contiguous range of the layout");
        }
        next_param = l.p_hi;
      }
      in = shapes[i];
    }
    if (next_param != m_layout.count) {
      throw InternalError("the layers' parameters do not cover the parameter layout");
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

  Plan build_forward(int batch) {
    const auto t0 = std::chrono::steady_clock::now();
    Plan plan;
    plan.batch = batch;
    plan.layers.resize(m_layers.size());
    cudnnHandle_t h = m_cudnn.get();
    std::string algos;
    for (std::size_t i = 0; i < m_layers.size(); ++i) {
      Layer& l = m_layers[i];
      LayerPlan& lp = plan.layers[i];
      SYNCOPT_CHECK_CUDNN(cudnnSetTensor4dDescriptor(
          lp.x.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, batch, l.in_c, l.in_h, l.in_w));
      SYNCOPT_CHECK_CUDNN(cudnnSetTensor4dDescriptor(
          lp.y.get(), CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, batch, l.out_c, l.out_h, l.out_w));
      if (l.spec.kind == LayerKind::kMaxPool2x2) {
        int n = 0, c = 0, oh = 0, ow = 0;
        SYNCOPT_CHECK_CUDNN(
            cudnnGetPooling2dForwardOutputDim(l.pool.get(), lp.x.get(), &n, &c, &oh, &ow));
        if (oh != l.out_h || ow != l.out_w) {
          throw InternalError("cuDNN max-pool output " + std::to_string(oh) + "x" +
                              std::to_string(ow) + " differs from the model's " +
                              std::to_string(l.out_h) + "x" + std::to_string(l.out_w));
        }
      }
      if (l.spec.kind != LayerKind::kConv3x3) continue;
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      int returned = 0;
      if (m_options.deterministic) {
        SYNCOPT_CHECK_CUDNN(cudnnGetConvolutionForwardAlgorithm_v7(
            h, lp.x.get(), l.filter.get(), l.conv.get(), lp.y.get(),
            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
      } else {
        SYNCOPT_CHECK_CUDNN(cudnnFindConvolutionForwardAlgorithm(
            h, lp.x.get(), l.filter.get(), l.conv.get(), lp.y.get(),
            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
      }
      lp.fwd_algo = choose(perf, returned, m_options.deterministic, "forward convolution").algo;
      std::size_t ws = 0;
      SYNCOPT_CHECK_CUDNN(cudnnGetConvolutionForwardWorkspaceSize(
          h, lp.x.get(), l.filter.get(), l.conv.get(), lp.y.get(), lp.fwd_algo, &ws));
      ensure_workspace(ws);
      algos += " " + l.spec.name + ".fwd=" + std::to_string(static_cast<int>(lp.fwd_algo));
    }
    spdlog::debug("cuda: batch {} forward plan in {:.1f} ms ({} algorithms):{}", batch,
                  1e3 * seconds_since(t0), m_options.deterministic ? "heuristic" : "timed", algos);
    return plan;
  }

  void build_backward(Plan& plan) {
    const auto t0 = std::chrono::steady_clock::now();
    cudnnHandle_t h = m_cudnn.get();
    std::string algos;
    for (std::size_t i = 0; i < m_layers.size(); ++i) {
      Layer& l = m_layers[i];
      LayerPlan& lp = plan.layers[i];
      if (l.spec.kind != LayerKind::kConv3x3) continue;
      cudnnConvolutionBwdFilterAlgoPerf_t fperf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      int returned = 0;
      if (m_options.deterministic) {
        SYNCOPT_CHECK_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
            h, lp.x.get(), lp.y.get(), l.conv.get(), l.filter.get(),
            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned, fperf));
      } else {
        SYNCOPT_CHECK_CUDNN(cudnnFindConvolutionBackwardFilterAlgorithm(
            h, lp.x.get(), lp.y.get(), l.conv.get(), l.filter.get(),
            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned, fperf));
      }
      lp.bwd_filter_algo =
          choose(fperf, returned, m_options.deterministic, "backward-filter convolution").algo;
      std::size_t ws = 0;
      SYNCOPT_CHECK_CUDNN(cudnnGetConvolutionBackwardFilterWorkspaceSize(
          h, lp.x.get(), lp.y.get(), l.conv.get(), l.filter.get(), lp.bwd_filter_algo, &ws));
      ensure_workspace(ws);
      algos +=
          " " + l.spec.name + ".bwd_filter=" + std::to_string(static_cast<int>(lp.bwd_filter_algo));
      if (i == 0) continue;  // no gradient w.r.t. the images
      cudnnConvolutionBwdDataAlgoPerf_t dperf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      if (m_options.deterministic) {
        SYNCOPT_CHECK_CUDNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(
            h, l.filter.get(), lp.y.get(), l.conv.get(), lp.x.get(),
            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, dperf));
      } else {
        SYNCOPT_CHECK_CUDNN(cudnnFindConvolutionBackwardDataAlgorithm(
            h, l.filter.get(), lp.y.get(), l.conv.get(), lp.x.get(),
            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, dperf));
      }
      lp.bwd_data_algo =
          choose(dperf, returned, m_options.deterministic, "backward-data convolution").algo;
      SYNCOPT_CHECK_CUDNN(cudnnGetConvolutionBackwardDataWorkspaceSize(
          h, l.filter.get(), lp.y.get(), l.conv.get(), lp.x.get(), lp.bwd_data_algo, &ws));
      ensure_workspace(ws);
      algos +=
          " " + l.spec.name + ".bwd_data=" + std::to_string(static_cast<int>(lp.bwd_data_algo));
    }
    // The gradient buffers exist once a network trains (evaluation-only
    // networks never pay for them). m_d[i] = dL/dm_t[i]; m_d[0] is unused.
    if (m_d.empty()) {
      const std::size_t n = static_cast<std::size_t>(m_max_batch);
      m_d.emplace_back();
      for (const Layer& l : m_layers) m_d.emplace_back(n * l.out_per);
      m_grad = DeviceBuffer<float>(m_layout.count);
      m_h_grad = PinnedBuffer<float>(m_layout.count);
    }
    plan.has_backward = true;
    spdlog::debug("cuda: batch {} backward plan in {:.1f} ms ({} algorithms):{}", plan.batch,
                  1e3 * seconds_since(t0), m_options.deterministic ? "heuristic" : "timed", algos);
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
    // future caller that does not wait.
    if (cudaEventQuery(in.up.get()) != cudaSuccess) {
      wait_event(in.up.get(), m_options.sync_timeout_s, "an earlier batch's upload");
    }
    const std::size_t image_nbytes =
        static_cast<std::size_t>(batch) * m_layers.front().in_per * sizeof(float);
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

  // Host-pointer path: layer l's parameters from `host` into m_params on the
  // copy stream; the compute stream waits for them.
  void upload_layer(Layer& l, const float* host) {
    const std::size_t nbytes = (l.p_hi - l.p_lo) * sizeof(float);
    std::memcpy(m_h_params.get() + l.p_lo, host + l.p_lo, nbytes);
    SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(m_params.get() + l.p_lo, m_h_params.get() + l.p_lo, nbytes,
                                       cudaMemcpyHostToDevice, m_copy.get()));
    SYNCOPT_CHECK_CUDA(cudaEventRecord(l.up.get(), m_copy.get()));
    SYNCOPT_CHECK_CUDA(cudaStreamWaitEvent(m_stream.get(), l.up.get(), 0));
  }

  // Host-pointer path: once layer l's gradient is complete on the compute
  // stream, down into pinned staging on the copy stream.
  void download_layer(Layer& l) {
    const std::size_t nbytes = (l.p_hi - l.p_lo) * sizeof(float);
    SYNCOPT_CHECK_CUDA(cudaEventRecord(l.grad_ready.get(), m_stream.get()));
    SYNCOPT_CHECK_CUDA(cudaStreamWaitEvent(m_copy.get(), l.grad_ready.get(), 0));
    SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(m_h_grad.get() + l.p_lo, m_grad.get() + l.p_lo, nbytes,
                                       cudaMemcpyDeviceToHost, m_copy.get()));
    SYNCOPT_CHECK_CUDA(cudaEventRecord(l.down.get(), m_copy.get()));
  }

  // Softmax cross-entropy of the logits: per-example losses and dL/dlogits.
  // Clears the flags (a bad label; a non-finite gradient) for this step.
  void loss_and_dlogits(int batch, const std::int32_t* d_labels) {
    const cudaStream_t s = m_stream.get();
    SYNCOPT_CHECK_CUDA(cudaMemsetAsync(m_flags.get(), 0, m_flags.nbytes(), s));
    softmax_cross_entropy(m_t.back().get(), d_labels, batch, m_classes, m_loss.get(),
                          m_d.back().get(), m_flags.get() + kBadLabel, s);
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

  // The weights the layer computes with: w = g v / ||v|| (weight norm) or w.
  const float* weights(const Layer& l, const float* P) const {
    return m_net.weight_norm ? l.w_eff.get() : P + l.w_off;
  }

  // Forward pass at parameters P (device). host_params non-null: the
  // host-pointer path, which uploads each layer's parameters from there
  // into P (= m_params) just before the layer runs.
  // x0: the images [batch, C, H, W] on the device (an input slot's).
  void forward(Plan& plan, const float* P, const float* host_params, const float* x0) {
    const cudaStream_t s = m_stream.get();
    const float one = 1.0f, zero = 0.0f;
    const int n = plan.batch;
    for (std::size_t i = 0; i < m_layers.size(); ++i) {
      Layer& l = m_layers[i];
      LayerPlan& lp = plan.layers[i];
      const float* x = i == 0 ? x0 : m_t[i].get();
      float* y = m_t[i + 1].get();
      if (l.has_params && host_params != nullptr) upload_layer(l, host_params);
      if (l.has_params && m_net.weight_norm) {
        weight_norm_forward(P + l.w_off, P + l.g_off, l.units, l.fan_in, l.w_eff.get(),
                            l.norm.get(), s);
      }
      switch (l.spec.kind) {
        case LayerKind::kConv3x3:
          SYNCOPT_CHECK_CUDNN(cudnnConvolutionForward(
              m_cudnn.get(), &one, lp.x.get(), x, l.filter.get(), weights(l, P), l.conv.get(),
              lp.fwd_algo, m_workspace.get(), m_workspace.nbytes(), &zero, lp.y.get(), y));
          bias_act_forward(y, P + l.b_off, n, l.out_c, l.out_h * l.out_w, l.spec.relu, s);
          break;
        case LayerKind::kFc:
          // Row-major y [n, out] = x [n, in] w[out, in]^T, i.e. column-major
          // y^T (out x n) = op_T(w as in x out) * x^T (in x n).
          SYNCOPT_CHECK_CUBLAS(cublasSgemm(m_cublas.get(), CUBLAS_OP_T, CUBLAS_OP_N, l.units, n,
                                           l.fan_in, &one, weights(l, P), l.fan_in, x, l.fan_in,
                                           &zero, y, l.units));
          bias_act_forward(y, P + l.b_off, n, l.units, 1, l.spec.relu, s);
          break;
        case LayerKind::kMaxPool2x2:
          SYNCOPT_CHECK_CUDNN(cudnnPoolingForward(m_cudnn.get(), l.pool.get(), &one, lp.x.get(), x,
                                                  &zero, lp.y.get(), y));
          break;
        case LayerKind::kRelu:
          SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(y, x,
                                             static_cast<std::size_t>(n) * l.in_per * sizeof(float),
                                             cudaMemcpyDeviceToDevice, s));
          bias_act_forward(y, nullptr, n, l.out_c, l.out_h * l.out_w, true, s);
          break;
      }
    }
  }

  // Backward pass at parameters P; expects m_d.back() = dL/dlogits; writes
  // the gradient G (device). download: the host-pointer path (G = m_grad),
  // which copies each layer's gradient down once it is complete.
  void backward(Plan& plan, const float* P, float* G, bool download, const float* x0) {
    const cudaStream_t s = m_stream.get();
    const float one = 1.0f, zero = 0.0f;
    const int n = plan.batch;
    for (std::size_t k = m_layers.size(); k-- > 0;) {
      Layer& l = m_layers[k];
      LayerPlan& lp = plan.layers[k];
      const bool need_data = k > 0;
      const float* x = k == 0 ? x0 : m_t[k].get();
      const float* y = m_t[k + 1].get();
      float* dy = m_d[k + 1].get();
      float* dx = m_d[k].get();
      const std::size_t out_count = static_cast<std::size_t>(n) * l.out_per;
      switch (l.spec.kind) {
        case LayerKind::kConv3x3:
        case LayerKind::kFc: {
          if (l.spec.relu) relu_backward(y, dy, out_count, dy, s);
          const int hw = l.out_h * l.out_w;
          bias_backward(dy, n, l.out_c, hw, G + l.b_off, m_bias_scratch.get(), s);
          float* dw = m_net.weight_norm ? l.dw.get() : G + l.w_off;
          if (l.spec.kind == LayerKind::kConv3x3) {
            SYNCOPT_CHECK_CUDNN(
                cudnnConvolutionBackwardFilter(m_cudnn.get(), &one, lp.x.get(), x, lp.y.get(), dy,
                                               l.conv.get(), lp.bwd_filter_algo, m_workspace.get(),
                                               m_workspace.nbytes(), &zero, l.filter.get(), dw));
          } else {
            // Row-major dw [out, in] = dy^T x, i.e. column-major
            // dw^T (in x out) = x^T (in x n) * op_T(dy^T as out x n).
            SYNCOPT_CHECK_CUBLAS(cublasSgemm(m_cublas.get(), CUBLAS_OP_N, CUBLAS_OP_T, l.fan_in,
                                             l.units, n, &one, x, l.fan_in, dy, l.units, &zero, dw,
                                             l.fan_in));
          }
          if (m_net.weight_norm) {
            weight_norm_backward(l.dw.get(), P + l.w_off, P + l.g_off, l.norm.get(), l.units,
                                 l.fan_in, G + l.w_off, G + l.g_off, s);
          }
          if (download) download_layer(l);
          if (!need_data) break;
          if (l.spec.kind == LayerKind::kConv3x3) {
            SYNCOPT_CHECK_CUDNN(cudnnConvolutionBackwardData(
                m_cudnn.get(), &one, l.filter.get(), weights(l, P), lp.y.get(), dy, l.conv.get(),
                lp.bwd_data_algo, m_workspace.get(), m_workspace.nbytes(), &zero, lp.x.get(), dx));
          } else {
            // Row-major dx [n, in] = dy [n, out] w [out, in], i.e. column-major
            // dx^T (in x n) = (w as in x out) * dy^T (out x n).
            SYNCOPT_CHECK_CUBLAS(cublasSgemm(m_cublas.get(), CUBLAS_OP_N, CUBLAS_OP_N, l.fan_in, n,
                                             l.units, &one, weights(l, P), l.fan_in, dy, l.units,
                                             &zero, dx, l.fan_in));
          }
          break;
        }
        case LayerKind::kMaxPool2x2:
          if (!need_data) break;
          // An odd row / column is in no window: its gradient is zero.
          if (l.in_h % 2 != 0 || l.in_w % 2 != 0) {
            SYNCOPT_CHECK_CUDA(
                cudaMemsetAsync(dx, 0, static_cast<std::size_t>(n) * l.in_per * sizeof(float), s));
          }
          SYNCOPT_CHECK_CUDNN(cudnnPoolingBackward(m_cudnn.get(), l.pool.get(), &one, lp.y.get(), y,
                                                   lp.y.get(), dy, lp.x.get(), x, &zero, lp.x.get(),
                                                   dx));
          break;
        case LayerKind::kRelu:
          if (need_data) relu_backward(y, dy, out_count, dx, s);
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

  nn::NetSpec m_net;
  CudaOptions m_options;
  nn::ParamLayout m_layout;
  int m_max_batch = 0;
  int m_device = 0;  // initialised (and made current) before the members below
  int m_classes = 0;
  // Declared before the buffers so that they are destroyed after them.
  CudaStream m_stream;       // all compute
  CudaStream m_copy;         // the host-pointer path's transfers
  CudaEvent m_compute_done;  // the host-pointer path: m_params free for the next upload
  CublasHandle m_cublas;
  CudnnHandle m_cudnn;
  std::vector<Layer> m_layers;
  std::map<int, Plan> m_plans;
  DeviceBuffer<unsigned char> m_workspace;
  DeviceBuffer<double> m_bias_scratch;
  DeviceBuffer<float> m_params, m_grad;  // the host-pointer path's device copies
  // m_t[i] is layer i's input (m_t[0] unused: the input slot's), m_t.back()
  // the logits.
  std::vector<DeviceBuffer<float>> m_t, m_d;
  std::array<InputSlot, 2> m_in;
  int m_next_slot = 0;
  DeviceBuffer<double> m_loss;
  DeviceBuffer<int> m_flags;  // [kFlagCount]: kBadLabel, kNonFinite
  PinnedBuffer<float> m_h_params, m_h_grad, m_h_logits;
  PinnedBuffer<double> m_h_loss;
  PinnedBuffer<int> m_h_flags;
};

class CudaBackend final : public nn::Backend {
 public:
  CudaBackend(int device, const CudaOptions& options) : m_device(device), m_options(options) {}
  std::string name() const override { return "cuda"; }
  std::unique_ptr<nn::Network> make_network(const nn::ModelSpec& spec, int max_batch) override {
    return std::make_unique<CudaNetwork>(nn::net_spec(spec), max_batch, m_device, m_options);
  }

 private:
  int m_device;
  CudaOptions m_options;
};

}  // namespace

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
