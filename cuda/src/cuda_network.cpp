// CudaBackend / CudaNetwork: the layer list of lib/nn (nn::net_spec, the
// same parameter layout and order as the CPU backend) run on one GPU:
// cuDNN for 3x3 convolutions (forward, backward-data, backward-filter; the
// algorithms found once per batch size) and 2x2 max-pooling, cuBLAS sgemm
// for the fully connected layers, and the kernels of kernels.cu for bias +
// ReLU, weight normalisation and the softmax cross-entropy.
//
// Everything of a step stays on the device: parameters, activations, their
// gradients and the parameter gradient. The Network interface speaks host
// pointers, so each call copies params / images / labels in and the grad /
// logits out, through pinned staging buffers, on the network's own stream.
// The parameter upload happens on every call (the interface cannot tell
// whether the caller's buffer changed; 3.4 MB for the reference CNN).
//
// Numerics: convolutions run in plain FP32 (CUDNN_FMA_MATH: no TF32 tensor
// cores), and cuBLAS in its default FP32 mode, so the results equal the CPU
// backend's within float rounding. A CudaNetwork is not thread-safe.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "common/error.hpp"
#include "handles.hpp"
#include "nn/backend.hpp"
#include "nn/cpu_network.hpp"
#include "syncopt_cuda/api.hpp"
#include "syncopt_cuda/check.hpp"
#include "syncopt_cuda/kernels.hpp"
#include "syncopt_cuda/memory.hpp"

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
  DeviceBuffer<float> w_eff, dw, norm;          // weight-norm scratch
  FilterDesc filter;                            // conv only
  ConvDesc conv;
  PoolDesc pool;
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

// The fastest algorithm that succeeded and fits the workspace limit,
// preferring a deterministic one when it is within 20% of that (so that
// repeated runs agree bit for bit where it is cheap).
template <class Perf>
Perf choose(const Perf* perf, int returned, const char* what) {
  const Perf* best = nullptr;
  for (int i = 0; i < returned; ++i) {
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= kMaxWorkspaceNbytes) {
      best = &perf[i];
      break;
    }
  }
  if (best == nullptr) {
    throw InternalError(std::string("cuDNN found no usable ") + what +
                        " algorithm for this layer shape");
  }
  if (best->determinism != CUDNN_DETERMINISTIC) {
    for (int i = 0; i < returned; ++i) {
      if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= kMaxWorkspaceNbytes &&
          perf[i].determinism == CUDNN_DETERMINISTIC && perf[i].time <= 1.2f * best->time) {
        return perf[i];
      }
    }
  }
  return *best;
}

class CudaNetwork final : public nn::Network {
 public:
  CudaNetwork(nn::NetSpec net, int max_batch, int device)
      : m_net(std::move(net)), m_max_batch(checked_batch(max_batch)), m_device(activate(device)) {
    m_layout = nn::param_layout(m_net);
    m_classes = static_cast<int>(nn::output_count(m_net));
    SYNCOPT_CHECK_CUBLAS(cublasSetStream(m_cublas.get(), m_stream.get()));
    SYNCOPT_CHECK_CUDNN(cudnnSetStream(m_cudnn.get(), m_stream.get()));
    build_layers();
    const std::size_t n = static_cast<std::size_t>(max_batch);
    m_params = DeviceBuffer<float>(m_layout.count);
    m_h_params = PinnedBuffer<float>(m_layout.count);
    m_t.emplace_back(n * m_layers.front().in_per);
    for (const Layer& l : m_layers) m_t.emplace_back(n * l.out_per);
    m_labels = DeviceBuffer<std::int32_t>(n);
    m_loss = DeviceBuffer<double>(n);
    m_bad_label = DeviceBuffer<int>(1);
    m_h_images = PinnedBuffer<float>(n * m_layers.front().in_per);
    m_h_labels = PinnedBuffer<std::int32_t>(n);
    m_h_logits = PinnedBuffer<float>(n * static_cast<std::size_t>(m_classes));
    m_h_loss = PinnedBuffer<double>(n);
    m_h_bad_label = PinnedBuffer<int>(1);
  }

  ~CudaNetwork() override {
    // Nothing may still run on the stream when the buffers are freed.
    (void)cudaSetDevice(m_device);
    (void)cudaStreamSynchronize(m_stream.get());
  }

  CudaNetwork(const CudaNetwork&) = delete;
  CudaNetwork& operator=(const CudaNetwork&) = delete;

  int max_batch() const override { return m_max_batch; }

  // params, grad [layout.count]; images [batch, C, H, W]; labels [batch].
  float train_step(const float* params, const float* images, const std::int32_t* labels, int batch,
                   float* grad) override {
    if (images == nullptr || labels == nullptr ||
        ((params == nullptr || grad == nullptr) && m_layout.count > 0)) {
      throw InternalError("CudaNetwork::train_step: null buffer");
    }
    SYNCOPT_CHECK_CUDA(cudaSetDevice(m_device));
    Plan& plan = plan_for(batch, true);
    const cudaStream_t s = m_stream.get();
    upload(params, images, batch);
    std::memcpy(m_h_labels.get(), labels, static_cast<std::size_t>(batch) * sizeof(std::int32_t));
    SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(m_labels.get(), m_h_labels.get(),
                                       static_cast<std::size_t>(batch) * sizeof(std::int32_t),
                                       cudaMemcpyHostToDevice, s));
    forward(plan);
    SYNCOPT_CHECK_CUDA(cudaMemsetAsync(m_bad_label.get(), 0, sizeof(int), s));
    softmax_cross_entropy(m_t.back().get(), m_labels.get(), batch, m_classes, m_loss.get(),
                          m_d.back().get(), m_bad_label.get(), s);
    backward(plan);
    SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(m_h_grad.get(), m_grad.get(), m_grad.nbytes(),
                                       cudaMemcpyDeviceToHost, s));
    SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(m_h_loss.get(), m_loss.get(),
                                       static_cast<std::size_t>(batch) * sizeof(double),
                                       cudaMemcpyDeviceToHost, s));
    SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(m_h_bad_label.get(), m_bad_label.get(), sizeof(int),
                                       cudaMemcpyDeviceToHost, s));
    m_stream.synchronize();
    if (*m_h_bad_label.get() != 0) throw_bad_label(labels, batch);
    if (m_layout.count > 0) std::memcpy(grad, m_h_grad.get(), m_grad.nbytes());
    double total = 0.0;
    for (int r = 0; r < batch; ++r) total += m_h_loss.get()[r];
    return static_cast<float>(total / batch);
  }

  // logits [batch, classes].
  void predict(const float* params, const float* images, int batch, float* logits) override {
    if (images == nullptr || logits == nullptr || (params == nullptr && m_layout.count > 0)) {
      throw InternalError("CudaNetwork::predict: null buffer");
    }
    SYNCOPT_CHECK_CUDA(cudaSetDevice(m_device));
    Plan& plan = plan_for(batch, false);
    upload(params, images, batch);
    forward(plan);
    const std::size_t n = static_cast<std::size_t>(batch) * static_cast<std::size_t>(m_classes);
    SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(m_h_logits.get(), m_t.back().get(), n * sizeof(float),
                                       cudaMemcpyDeviceToHost, m_stream.get()));
    m_stream.synchronize();
    std::memcpy(logits, m_h_logits.get(), n * sizeof(float));
  }

 private:
  static int checked_batch(int max_batch) {
    if (max_batch < 1) {
      throw ConfigError("network max batch must be >= 1, got " + std::to_string(max_batch));
    }
    return max_batch;
  }
  // Makes `device` current before the stream and handles below are created
  // (they belong to the device that is current at their creation).
  static int activate(int device) {
    SYNCOPT_CHECK_CUDA(cudaSetDevice(device));
    return device;
  }

  void build_layers() {
    const auto shapes = nn::layer_output_shapes(m_net);
    std::vector<std::int64_t> in = {m_net.channels, m_net.height, m_net.width};
    m_layers.resize(m_net.layers.size());
    if (m_layers.empty()) throw ConfigError("a model needs at least one layer");
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
          SYNCOPT_CHECK_CUDNN(cudnnSetPooling2dDescriptor(l.pool.get(),
                                                          CUDNN_POOLING_MAX_DETERMINISTIC,
                                                          CUDNN_NOT_PROPAGATE_NAN, 2, 2, 0, 0, 2, 2));
          break;
        case LayerKind::kRelu:
          break;
      }
      if (l.spec.kind == LayerKind::kConv3x3 || l.spec.kind == LayerKind::kFc) {
        l.has_params = true;
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
      }
      in = shapes[i];
    }
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
    m_stream.synchronize();  // the old workspace may be in use by queued work
    m_workspace = DeviceBuffer<unsigned char>();
    m_workspace = DeviceBuffer<unsigned char>(nbytes);
  }

  Plan build_forward(int batch) {
    Plan plan;
    plan.batch = batch;
    plan.layers.resize(m_layers.size());
    cudnnHandle_t h = m_cudnn.get();
    for (std::size_t i = 0; i < m_layers.size(); ++i) {
      Layer& l = m_layers[i];
      LayerPlan& lp = plan.layers[i];
      SYNCOPT_CHECK_CUDNN(cudnnSetTensor4dDescriptor(lp.x.get(), CUDNN_TENSOR_NCHW,
                                                     CUDNN_DATA_FLOAT, batch, l.in_c, l.in_h,
                                                     l.in_w));
      SYNCOPT_CHECK_CUDNN(cudnnSetTensor4dDescriptor(lp.y.get(), CUDNN_TENSOR_NCHW,
                                                     CUDNN_DATA_FLOAT, batch, l.out_c, l.out_h,
                                                     l.out_w));
      if (l.spec.kind == LayerKind::kMaxPool2x2) {
        int n = 0, c = 0, oh = 0, ow = 0;
        SYNCOPT_CHECK_CUDNN(cudnnGetPooling2dForwardOutputDim(l.pool.get(), lp.x.get(), &n, &c,
                                                              &oh, &ow));
        if (oh != l.out_h || ow != l.out_w) {
          throw InternalError("cuDNN max-pool output " + std::to_string(oh) + "x" +
                              std::to_string(ow) + " differs from the model's " +
                              std::to_string(l.out_h) + "x" + std::to_string(l.out_w));
        }
      }
      if (l.spec.kind != LayerKind::kConv3x3) continue;
      cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
      int returned = 0;
      SYNCOPT_CHECK_CUDNN(cudnnFindConvolutionForwardAlgorithm(
          h, lp.x.get(), l.filter.get(), l.conv.get(), lp.y.get(),
          CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf));
      lp.fwd_algo = choose(perf, returned, "forward convolution").algo;
      std::size_t ws = 0;
      SYNCOPT_CHECK_CUDNN(cudnnGetConvolutionForwardWorkspaceSize(
          h, lp.x.get(), l.filter.get(), l.conv.get(), lp.y.get(), lp.fwd_algo, &ws));
      ensure_workspace(ws);
    }
    return plan;
  }

  void build_backward(Plan& plan) {
    cudnnHandle_t h = m_cudnn.get();
    for (std::size_t i = 0; i < m_layers.size(); ++i) {
      Layer& l = m_layers[i];
      LayerPlan& lp = plan.layers[i];
      if (l.spec.kind != LayerKind::kConv3x3) continue;
      cudnnConvolutionBwdFilterAlgoPerf_t fperf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      int returned = 0;
      SYNCOPT_CHECK_CUDNN(cudnnFindConvolutionBackwardFilterAlgorithm(
          h, lp.x.get(), lp.y.get(), l.conv.get(), l.filter.get(),
          CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned, fperf));
      lp.bwd_filter_algo = choose(fperf, returned, "backward-filter convolution").algo;
      std::size_t ws = 0;
      SYNCOPT_CHECK_CUDNN(cudnnGetConvolutionBackwardFilterWorkspaceSize(
          h, lp.x.get(), lp.y.get(), l.conv.get(), l.filter.get(), lp.bwd_filter_algo, &ws));
      ensure_workspace(ws);
      if (i == 0) continue;  // no gradient w.r.t. the images
      cudnnConvolutionBwdDataAlgoPerf_t dperf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      SYNCOPT_CHECK_CUDNN(cudnnFindConvolutionBackwardDataAlgorithm(
          h, l.filter.get(), lp.y.get(), l.conv.get(), lp.x.get(),
          CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, dperf));
      lp.bwd_data_algo = choose(dperf, returned, "backward-data convolution").algo;
      SYNCOPT_CHECK_CUDNN(cudnnGetConvolutionBackwardDataWorkspaceSize(
          h, l.filter.get(), lp.y.get(), l.conv.get(), lp.x.get(), lp.bwd_data_algo, &ws));
      ensure_workspace(ws);
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
  }

  void upload(const float* params, const float* images, int batch) {
    const cudaStream_t s = m_stream.get();
    // The previous call's copies out of the staging buffers are complete
    // (every call ends with a stream synchronize), so they can be refilled.
    if (m_layout.count > 0) {
      std::memcpy(m_h_params.get(), params, m_params.nbytes());
      SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(m_params.get(), m_h_params.get(), m_params.nbytes(),
                                         cudaMemcpyHostToDevice, s));
    }
    const std::size_t image_nbytes =
        static_cast<std::size_t>(batch) * m_layers.front().in_per * sizeof(float);
    std::memcpy(m_h_images.get(), images, image_nbytes);
    SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(m_t[0].get(), m_h_images.get(), image_nbytes,
                                       cudaMemcpyHostToDevice, s));
  }

  // The weights the layer computes with: w = g v / ||v|| (weight norm) or w.
  const float* weights(const Layer& l) const {
    return m_net.weight_norm ? l.w_eff.get() : m_params.get() + l.w_off;
  }

  void forward(Plan& plan) {
    const cudaStream_t s = m_stream.get();
    const float one = 1.0f, zero = 0.0f;
    const int n = plan.batch;
    for (std::size_t i = 0; i < m_layers.size(); ++i) {
      Layer& l = m_layers[i];
      LayerPlan& lp = plan.layers[i];
      const float* x = m_t[i].get();
      float* y = m_t[i + 1].get();
      if (l.has_params && m_net.weight_norm) {
        weight_norm_forward(m_params.get() + l.w_off, m_params.get() + l.g_off, l.units, l.fan_in,
                            l.w_eff.get(), l.norm.get(), s);
      }
      switch (l.spec.kind) {
        case LayerKind::kConv3x3:
          SYNCOPT_CHECK_CUDNN(cudnnConvolutionForward(
              m_cudnn.get(), &one, lp.x.get(), x, l.filter.get(), weights(l), l.conv.get(),
              lp.fwd_algo, m_workspace.get(), m_workspace.nbytes(), &zero, lp.y.get(), y));
          bias_act_forward(y, m_params.get() + l.b_off, n, l.out_c, l.out_h * l.out_w,
                           l.spec.relu, s);
          break;
        case LayerKind::kFc:
          // Row-major y [n, out] = x [n, in] w[out, in]^T, i.e. column-major
          // y^T (out x n) = op_T(w as in x out) * x^T (in x n).
          SYNCOPT_CHECK_CUBLAS(cublasSgemm(m_cublas.get(), CUBLAS_OP_T, CUBLAS_OP_N, l.units, n,
                                           l.fan_in, &one, weights(l), l.fan_in, x, l.fan_in,
                                           &zero, y, l.units));
          bias_act_forward(y, m_params.get() + l.b_off, n, l.units, 1, l.spec.relu, s);
          break;
        case LayerKind::kMaxPool2x2:
          SYNCOPT_CHECK_CUDNN(cudnnPoolingForward(m_cudnn.get(), l.pool.get(), &one, lp.x.get(),
                                                  x, &zero, lp.y.get(), y));
          break;
        case LayerKind::kRelu:
          SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(y, x, static_cast<std::size_t>(n) * l.in_per *
                                                       sizeof(float),
                                             cudaMemcpyDeviceToDevice, s));
          bias_act_forward(y, nullptr, n, l.out_c, l.out_h * l.out_w, true, s);
          break;
      }
    }
  }

  // Expects m_d.back() = dL/dlogits. Writes m_grad.
  void backward(Plan& plan) {
    const cudaStream_t s = m_stream.get();
    const float one = 1.0f, zero = 0.0f;
    const int n = plan.batch;
    float* grad = m_grad.get();
    for (std::size_t k = m_layers.size(); k-- > 0;) {
      Layer& l = m_layers[k];
      LayerPlan& lp = plan.layers[k];
      const bool need_data = k > 0;
      const float* x = m_t[k].get();
      const float* y = m_t[k + 1].get();
      float* dy = m_d[k + 1].get();
      float* dx = m_d[k].get();
      const std::size_t out_count = static_cast<std::size_t>(n) * l.out_per;
      switch (l.spec.kind) {
        case LayerKind::kConv3x3:
        case LayerKind::kFc: {
          if (l.spec.relu) relu_backward(y, dy, out_count, dy, s);
          const int hw = l.out_h * l.out_w;
          bias_backward(dy, n, l.out_c, hw, grad + l.b_off, s);
          float* dw = m_net.weight_norm ? l.dw.get() : grad + l.w_off;
          if (l.spec.kind == LayerKind::kConv3x3) {
            SYNCOPT_CHECK_CUDNN(cudnnConvolutionBackwardFilter(
                m_cudnn.get(), &one, lp.x.get(), x, lp.y.get(), dy, l.conv.get(),
                lp.bwd_filter_algo, m_workspace.get(), m_workspace.nbytes(), &zero,
                l.filter.get(), dw));
          } else {
            // Row-major dw [out, in] = dy^T x, i.e. column-major
            // dw^T (in x out) = x^T (in x n) * op_T(dy^T as out x n).
            SYNCOPT_CHECK_CUBLAS(cublasSgemm(m_cublas.get(), CUBLAS_OP_N, CUBLAS_OP_T, l.fan_in,
                                             l.units, n, &one, x, l.fan_in, dy, l.units, &zero,
                                             dw, l.fan_in));
          }
          if (m_net.weight_norm) {
            weight_norm_backward(l.dw.get(), m_params.get() + l.w_off, m_params.get() + l.g_off,
                                 l.norm.get(), l.units, l.fan_in, grad + l.w_off, grad + l.g_off,
                                 s);
          }
          if (!need_data) break;
          if (l.spec.kind == LayerKind::kConv3x3) {
            SYNCOPT_CHECK_CUDNN(cudnnConvolutionBackwardData(
                m_cudnn.get(), &one, l.filter.get(), weights(l), lp.y.get(), dy, l.conv.get(),
                lp.bwd_data_algo, m_workspace.get(), m_workspace.nbytes(), &zero, lp.x.get(), dx));
          } else {
            // Row-major dx [n, in] = dy [n, out] w [out, in], i.e. column-major
            // dx^T (in x n) = (w as in x out) * dy^T (out x n).
            SYNCOPT_CHECK_CUBLAS(cublasSgemm(m_cublas.get(), CUBLAS_OP_N, CUBLAS_OP_N, l.fan_in, n,
                                             l.units, &one, weights(l), l.fan_in, dy, l.units,
                                             &zero, dx, l.fan_in));
          }
          break;
        }
        case LayerKind::kMaxPool2x2:
          if (!need_data) break;
          // An odd row / column is in no window: its gradient is zero.
          if (l.in_h % 2 != 0 || l.in_w % 2 != 0) {
            SYNCOPT_CHECK_CUDA(cudaMemsetAsync(dx, 0, static_cast<std::size_t>(n) * l.in_per *
                                                          sizeof(float), s));
          }
          SYNCOPT_CHECK_CUDNN(cudnnPoolingBackward(m_cudnn.get(), l.pool.get(), &one, lp.y.get(),
                                                   y, lp.y.get(), dy, lp.x.get(), x, &zero,
                                                   lp.x.get(), dx));
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
    throw InternalError("the GPU saw a label outside [0, classes) that the host copy does not have");
  }

  nn::NetSpec m_net;
  nn::ParamLayout m_layout;
  int m_max_batch = 0;
  int m_device = 0;  // initialised (and made current) before the members below
  int m_classes = 0;
  // Declared before the buffers so that they are destroyed after them.
  CudaStream m_stream;
  CublasHandle m_cublas;
  CudnnHandle m_cudnn;
  std::vector<Layer> m_layers;
  std::map<int, Plan> m_plans;
  DeviceBuffer<unsigned char> m_workspace;
  DeviceBuffer<float> m_params, m_grad;
  std::vector<DeviceBuffer<float>> m_t, m_d;  // m_t[0] = images, m_t.back() = logits
  DeviceBuffer<std::int32_t> m_labels;
  DeviceBuffer<double> m_loss;
  DeviceBuffer<int> m_bad_label;
  PinnedBuffer<float> m_h_params, m_h_grad, m_h_images, m_h_logits;
  PinnedBuffer<std::int32_t> m_h_labels;
  PinnedBuffer<double> m_h_loss;
  PinnedBuffer<int> m_h_bad_label;
};

class CudaBackend final : public nn::Backend {
 public:
  explicit CudaBackend(int device) : m_device(device) {}
  std::string name() const override { return "cuda"; }
  std::unique_ptr<nn::Network> make_network(const nn::ModelSpec& spec, int max_batch) override {
    return std::make_unique<CudaNetwork>(nn::net_spec(spec), max_batch, m_device);
  }

 private:
  int m_device;
};

}  // namespace

std::unique_ptr<nn::Backend> make_cuda_backend(int threads, int device) {
  const int n = device_count();
  if (n == 0) {
    throw ConfigError(
        "compute.backend = \"cuda\" but this process sees no CUDA device (no driver, no GPU, or "
        "CUDA_VISIBLE_DEVICES hides them); run on a GPU node or use compute.backend = \"cpu\"");
  }
  if (device < 0 || device >= n) {
    throw ConfigError("CUDA device " + std::to_string(device) + " does not exist; this process sees " +
                      std::to_string(n) + " device(s)");
  }
  (void)threads;  // the host side of a step is one thread
  return std::make_unique<CudaBackend>(device);
}

}  // namespace syncopt::cuda
