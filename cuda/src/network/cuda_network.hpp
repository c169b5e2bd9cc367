// The CUDA network (see network.cpp for what it does and how): the class,
// shared by the files that implement it (network.cpp: the node table and
// the plans; transfers.cpp: the transfers and the training entry points;
// passes.cpp: the forward and backward walks, prediction and the
// batch-norm statistics).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "kinds.hpp"
#include "nn/backend.hpp"
#include "syncopt_cuda/api.hpp"

namespace syncopt::cuda::net {

// One of the two input buffers (see the file comment): device images and
// labels of up to max_batch examples, their pinned staging, and the events
// that order them: `up` on the copy stream after the upload, `read` on the
// compute stream after the last kernel that reads the slot.
struct InputSlot {
  DeviceBuffer<float> x;
  DeviceBuffer<__nv_bfloat16> x16;  // bf16: the images converted on the compute stream
  DeviceBuffer<std::int32_t> labels;
  PinnedBuffer<float> h_x;
  PinnedBuffer<std::int32_t> h_labels;
  CudaEvent up, read;
};

// The per-step flags, one int each, cleared and read back with the losses.
constexpr int kBadLabel = 0;
constexpr int kNonFinite = 1;
constexpr int kFlagCount = 2;

class CudaNetwork final : public DeviceNetwork {
 public:
  CudaNetwork(nn::Graph graph, int max_batch, int device, const CudaOptions& options);
  ~CudaNetwork() override;
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
                                   float* input_grad) override;
  // The staged step (syncopt_cuda/staged.hpp); the same loss and gradient
  // bits as train_step.
  float train_step_staged(const float* params, const float* images, const std::int32_t* labels,
                          int batch, float* grad, nn::StepHooks& hooks) override;
  // d_params, d_grad [layout.count] device; images, labels host.
  float train_step_device(const float* d_params, const float* images, const std::int32_t* labels,
                          int batch, float* d_grad, bool* grad_finite) override;
  // logits [batch, classes]; batch norm with the set statistics, dropout off.
  void predict(const float* params, const float* images, int batch, float* logits) override;
  // The precise statistics of `params` (see network.cpp); images
  // [batches * batch, C, H, W] on the host.
  void set_batch_norm_statistics(const float* params, const float* images, int batch,
                                 int batches) override;

 private:
  friend class StagedDevice;

  static int checked_batch(int max_batch);
  // Makes `device` current before the streams, events and handles below are
  // created (they belong to the device that is current at their creation).
  static int activate(int device);

  // A graph of parameter-free layers may be given null parameter and
  // gradient buffers (as the CPU backend allows).
  bool has_params() const { return m_graph.layout.count > 0; }

  std::size_t input_per_example() const {
    return static_cast<std::size_t>(m_graph.input[0] * m_graph.input[1] * m_graph.input[2]);
  }

  const KindOps& ops(std::size_t j) const { return kind_ops(m_graph.nodes[j].type); }

  void build_nodes();
  void allocate_buffers();
  Plan& plan_for(int batch, bool backward);
  Plan build_forward(int batch);
  void build_backward(Plan& plan);
  void make_gradient_buffers();
  void ensure_workspace(std::size_t nbytes);

  // The transfers.
  void set_step_key(const float* images, const std::int32_t* labels, int batch);
  void params_may_be_refilled();
  InputSlot& stage_inputs(const float* images, const std::int32_t* labels, int batch);
  void upload_node(NodeRt& r, const float* host);
  // The images of a slot as the first layer reads them (bf16: converted).
  const void* input_of(const InputSlot& in) const;
  void download_node(NodeRt& r);
  void unstage_gradient(const NodeRt& r, float* grad);
  float host_train_step(const float* params, const float* images, const std::int32_t* labels,
                        int batch, float* grad, float* input_grad);
  void loss_and_dlogits(int batch, const std::int32_t* d_labels);
  void download_losses(int batch);
  float finish_loss(const std::int32_t* labels, int batch, bool* grad_finite);
  float read_loss(const std::int32_t* labels, int batch, bool* grad_finite) const;
  [[noreturn]] void throw_bad_label(const std::int32_t* labels, int batch) const;

  // The passes.
  Pass make_pass(Plan& plan, Mode mode, const float* P, float* G, const void* x0,
                 void* dinput) const;
  // Node j of a pass: its kind's forward; the fused ReLU's mask, then its
  // kind's backward.
  void forward_node(const Pass& ps, std::size_t j);
  void backward_node(const Pass& ps, std::size_t j);
  // Forward pass at parameters P (device). host_params non-null: the
  // host-pointer path, which uploads each node's parameters from there into
  // P (= m_params) just before the node runs. x0: the images [batch, C, H,
  // W] on the device (an input slot's).
  void forward(Plan& plan, Mode mode, const float* P, const float* host_params, const void* x0);
  // Backward pass at parameters P; expects dL/dlogits in the last node's
  // gradient; writes the gradient G (device). download: the host-pointer
  // path (G = m_grad), which copies each node's gradient group down once it
  // is complete. dinput: dL/dimages [batch, C, H, W] on the device, or null.
  void backward(Plan& plan, const float* P, float* G, bool download, const void* x0, void* dinput);

  nn::Graph m_graph;
  CudaOptions m_options;
  int m_max_batch = 0;
  int m_device = 0;  // initialised (and made current) before the members below
  int m_classes = 0;
  Numerics m_numerics;
  nn::GradientPlan m_gradients;
  std::optional<std::uint64_t> m_dropout_key;
  std::uint64_t m_step_key = 0;
  bool m_stats_set = false;
  // Declared before the buffers so that they are destroyed after them.
  CudaStream m_stream;       // all compute
  CudaStream m_copy;         // the host-pointer path's transfers
  CudaEvent m_compute_done;  // the host-pointer path: m_params free for the next upload
  CudaEvent m_loss_down;     // the staged step: the losses and flags are on the host
  CublasHandle m_cublas;
  CudnnHandle m_cudnn;
  std::vector<NodeRt> m_nodes;
  std::map<int, Plan> m_plans;
  DeviceBuffer<unsigned char> m_workspace;
  DeviceBuffer<double> m_bias_scratch;
  DeviceBuffer<float> m_params, m_grad;  // the host-pointer path's device copies
  // m_t[j]: node j's output (the last: the logits). m_d[j]: dL/d(node j's
  // output) where node j owns its gradient buffer; m_dptr[j] where it is.
  // Both in the activations' type (Numerics), as bytes.
  std::vector<DeviceBuffer<unsigned char>> m_t, m_d;
  std::vector<void*> m_tptr, m_dptr;
  DeviceBuffer<unsigned char> m_scratch;   // a batch norm's unwanted dL/dimages
  DeviceBuffer<float> m_dinput;            // dL/dimages (train_step_with_input_grad)
  DeviceBuffer<__nv_bfloat16> m_dinput16;  // bf16: dL/dimages as the backward gives it
  DeviceBuffer<float> m_logits32;          // bf16: the logits widened for predict
  std::array<InputSlot, 2> m_in;
  int m_next_slot = 0;
  DeviceBuffer<double> m_loss;
  DeviceBuffer<int> m_flags;  // [kFlagCount]: kBadLabel, kNonFinite
  PinnedBuffer<float> m_h_params, m_h_grad, m_h_logits, m_h_dinput;
  PinnedBuffer<double> m_h_loss;
  PinnedBuffer<int> m_h_flags;
};

}  // namespace syncopt::cuda::net
