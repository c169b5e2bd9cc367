// The CUDA network's transfers and training entry points (see network.cpp):
// inputs through the two pinned slots, parameters up and gradients down
// node by node on the copy stream, the losses read back, and the three
// training steps: on device buffers, on host buffers, and staged for the
// pipelined exchange (syncopt_cuda/staged.hpp).
#include <cstring>

#include "common/error.hpp"
#include "cuda_network.hpp"
#include "nn/dropout.hpp"
#include "syncopt_cuda/check.hpp"
#include "syncopt_cuda/kernels.hpp"
#include "syncopt_cuda/staged.hpp"
#include "syncopt_cuda/sync.hpp"

namespace syncopt::cuda::net {

// The dropout key of a step: fixed, or a hash of the batch (the CPU
// backend's, nn/dropout.hpp).
void CudaNetwork::set_step_key(const float* images, const std::int32_t* labels, int batch) {
  if (!m_graph.has_dropout) return;
  m_step_key = m_dropout_key ? *m_dropout_key
                             : nn::dropout::batch_key(
                                   images, static_cast<std::size_t>(batch) * input_per_example(),
                                   labels, batch);
}

// The host-pointer path refills m_params on the copy stream, which must not
// overtake what the compute stream still reads from it.
void CudaNetwork::params_may_be_refilled() {
  SYNCOPT_CHECK_CUDA(cudaEventRecord(m_compute_done.get(), m_stream.get()));
  SYNCOPT_CHECK_CUDA(cudaStreamWaitEvent(m_copy.get(), m_compute_done.get(), 0));
}

// Images (and labels, unless null) into the next input slot's pinned
// staging, up on the copy stream once the compute stream is done with that
// slot's device buffers (two calls ago); the compute stream waits for the
// upload. The caller records the slot's `read` event after its last use of
// the slot on the compute stream.
InputSlot& CudaNetwork::stage_inputs(const float* images, const std::int32_t* labels, int batch) {
  InputSlot& in = m_in[static_cast<std::size_t>(m_next_slot)];
  m_next_slot ^= 1;
  const cudaStream_t c = m_copy.get();
  // The pinned staging is free once the slot's last upload has run. Every
  // call ends with a wait for the compute stream, which waited for that
  // upload, so this query finds it done; the bounded wait is for a caller
  // that does not wait (the statistics pass, batch after batch).
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
  // bf16: the images converted on the compute stream, which the slot's
  // `read` event covers like every other use of the slot.
  if (m_numerics.bf16) {
    convert(in.x.get(), static_cast<std::size_t>(batch) * input_per_example(), in.x16.get(),
            m_stream.get());
  }
  return in;
}

const void* CudaNetwork::input_of(const InputSlot& in) const {
  return m_numerics.bf16 ? static_cast<const void*>(in.x16.get()) : in.x.get();
}

// Host-pointer path: node r's parameter group from `host` into m_params on
// the copy stream; the compute stream waits for it.
void CudaNetwork::upload_node(NodeRt& r, const float* host) {
  const std::size_t nbytes = (r.p_hi - r.p_lo) * sizeof(float);
  std::memcpy(m_h_params.get() + r.p_lo, host + r.p_lo, nbytes);
  SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(m_params.get() + r.p_lo, m_h_params.get() + r.p_lo, nbytes,
                                     cudaMemcpyHostToDevice, m_copy.get()));
  SYNCOPT_CHECK_CUDA(cudaEventRecord(r.up.get(), m_copy.get()));
  SYNCOPT_CHECK_CUDA(cudaStreamWaitEvent(m_stream.get(), r.up.get(), 0));
}

// Host-pointer path: once node r's gradient group is complete on the
// compute stream, down into pinned staging on the copy stream.
void CudaNetwork::download_node(NodeRt& r) {
  const std::size_t nbytes = (r.p_hi - r.p_lo) * sizeof(float);
  SYNCOPT_CHECK_CUDA(cudaEventRecord(r.grad_ready.get(), m_stream.get()));
  SYNCOPT_CHECK_CUDA(cudaStreamWaitEvent(m_copy.get(), r.grad_ready.get(), 0));
  SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(m_h_grad.get() + r.p_lo, m_grad.get() + r.p_lo, nbytes,
                                     cudaMemcpyDeviceToHost, m_copy.get()));
  SYNCOPT_CHECK_CUDA(cudaEventRecord(r.down.get(), m_copy.get()));
}

// Waits for node r's gradient download and copies it out of the staging.
void CudaNetwork::unstage_gradient(const NodeRt& r, float* grad) {
  wait_event(r.down.get(), m_options.sync_timeout_s, "the gradient download of " + r.node->name);
  std::memcpy(grad + r.p_lo, m_h_grad.get() + r.p_lo, (r.p_hi - r.p_lo) * sizeof(float));
}

float CudaNetwork::train_step_with_input_grad(const float* params, const float* images,
                                              const std::int32_t* labels, int batch, float* grad,
                                              float* input_grad) {
  if (input_grad == nullptr) throw InternalError("train_step_with_input_grad: null input_grad");
  return host_train_step(params, images, labels, batch, grad, input_grad);
}

float CudaNetwork::train_step_device(const float* d_params, const float* images,
                                     const std::int32_t* labels, int batch, float* d_grad,
                                     bool* grad_finite) {
  if (images == nullptr || labels == nullptr || (d_params == nullptr && has_params()) ||
      (d_grad == nullptr && has_params())) {
    throw InternalError("CudaNetwork::train_step_device: null buffer");
  }
  SYNCOPT_CHECK_CUDA(cudaSetDevice(m_device));
  Plan& plan = plan_for(batch, true);
  const cudaStream_t s = m_stream.get();
  set_step_key(images, labels, batch);
  InputSlot& in = stage_inputs(images, labels, batch);
  forward(plan, Mode::kTrain, d_params, nullptr, input_of(in));
  loss_and_dlogits(batch, in.labels.get());
  backward(plan, d_params, d_grad, false, input_of(in), nullptr);
  SYNCOPT_CHECK_CUDA(cudaEventRecord(in.read.get(), s));
  // The divergence check rides on the loss read-back: the same wait.
  if (grad_finite != nullptr)
    flag_nonfinite(d_grad, m_graph.layout.count, m_flags.get() + kNonFinite, s);
  download_losses(batch);
  return finish_loss(labels, batch, grad_finite);
}

// train_step with host pointers (input_grad: also dL/dimages, else null).
float CudaNetwork::host_train_step(const float* params, const float* images,
                                   const std::int32_t* labels, int batch, float* grad,
                                   float* input_grad) {
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
    if (m_numerics.bf16) m_dinput16 = DeviceBuffer<__nv_bfloat16>(cap);
  }
  set_step_key(images, labels, batch);
  params_may_be_refilled();
  InputSlot& in = stage_inputs(images, labels, batch);
  forward(plan, Mode::kTrain, m_params.get(), params, input_of(in));
  loss_and_dlogits(batch, in.labels.get());
  void* dinput = nullptr;
  if (input_grad != nullptr) {
    dinput = m_numerics.bf16 ? static_cast<void*>(m_dinput16.get()) : m_dinput.get();
  }
  backward(plan, m_params.get(), m_grad.get(), true, input_of(in), dinput);
  SYNCOPT_CHECK_CUDA(cudaEventRecord(in.read.get(), s));
  const std::size_t in_count = static_cast<std::size_t>(batch) * input_per_example();
  if (input_grad != nullptr && m_numerics.bf16) {
    convert(m_dinput16.get(), static_cast<std::size_t>(batch) * input_per_example(), m_dinput.get(),
            s);
  }
  if (input_grad != nullptr) {  // down with the losses, under the same wait
    SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(m_h_dinput.get(), m_dinput.get(), in_count * sizeof(float),
                                       cudaMemcpyDeviceToHost, s));
  }
  download_losses(batch);
  // Unstage each node's gradient as soon as it is down, last node first
  // (the order the backward pass finishes them).
  for (std::size_t k = m_nodes.size(); k-- > 0;) {
    if (m_nodes[k].has_params) unstage_gradient(m_nodes[k], grad);
  }
  const float loss = finish_loss(labels, batch, nullptr);
  if (input_grad != nullptr) std::memcpy(input_grad, m_h_dinput.get(), in_count * sizeof(float));
  return loss;
}

// The device operations of syncopt_cuda/staged.hpp's staged step on the
// host-pointer path's buffers: the plan's passes, node by node.
class StagedDevice {
 public:
  StagedDevice(CudaNetwork& net, Plan& plan, const float* params, const std::int32_t* labels,
               float* grad, const InputSlot& in)
      : m_net(net),
        m_plan(plan),
        m_params(params),
        m_labels(labels),
        m_grad(grad),
        m_in(in),
        m_fwd(net.make_pass(plan, Mode::kTrain, net.m_params.get(), nullptr, net.input_of(in),
                            nullptr)),
        m_bwd(net.make_pass(plan, Mode::kTrain, net.m_params.get(), net.m_grad.get(),
                            net.input_of(in), nullptr)) {}

  void upload(std::size_t j) { m_net.upload_node(m_net.m_nodes[j], m_params); }
  void forward(std::size_t j) { m_net.forward_node(m_fwd, j); }
  void loss() {
    m_net.loss_and_dlogits(m_plan.batch, m_in.labels.get());
    m_net.download_losses(m_plan.batch);
    SYNCOPT_CHECK_CUDA(cudaEventRecord(m_net.m_loss_down.get(), m_net.m_stream.get()));
  }
  void backward(std::size_t j) { m_net.backward_node(m_bwd, j); }
  void download(std::size_t j) { m_net.download_node(m_net.m_nodes[j]); }
  float wait_loss() {
    wait_event(m_net.m_loss_down.get(), m_net.m_options.sync_timeout_s, "the staged step's loss");
    return m_net.read_loss(m_labels, m_plan.batch, nullptr);
  }
  void wait_download(std::size_t j) { m_net.unstage_gradient(m_net.m_nodes[j], m_grad); }
  void finish() {
    SYNCOPT_CHECK_CUDA(cudaEventRecord(m_in.read.get(), m_net.m_stream.get()));
    wait_stream(m_net.m_stream.get(), m_net.m_options.sync_timeout_s, "a staged training step");
  }

 private:
  CudaNetwork& m_net;
  Plan& m_plan;
  const float* m_params;
  const std::int32_t* m_labels;
  float* m_grad;
  const InputSlot& m_in;
  Pass m_fwd, m_bwd;
};

float CudaNetwork::train_step_staged(const float* params, const float* images,
                                     const std::int32_t* labels, int batch, float* grad,
                                     nn::StepHooks& hooks) {
  if (images == nullptr || labels == nullptr ||
      ((params == nullptr || grad == nullptr) && has_params())) {
    throw InternalError("CudaNetwork::train_step_staged: null buffer");
  }
  SYNCOPT_CHECK_CUDA(cudaSetDevice(m_device));
  Plan& plan = plan_for(batch, true);
  set_step_key(images, labels, batch);
  params_may_be_refilled();
  InputSlot& in = stage_inputs(images, labels, batch);
  StagedDevice device(*this, plan, params, labels, grad, in);
  return staged_step(m_graph, hooks, device);
}

// Softmax cross-entropy of the logits: per-example losses and dL/dlogits.
// Clears the flags (a bad label; a non-finite gradient) for this step.
void CudaNetwork::loss_and_dlogits(int batch, const std::int32_t* d_labels) {
  const cudaStream_t s = m_stream.get();
  SYNCOPT_CHECK_CUDA(cudaMemsetAsync(m_flags.get(), 0, m_flags.nbytes(), s));
  with_type(m_numerics, [&]<class T>() {
    softmax_cross_entropy(static_cast<const T*>(m_tptr.back()), d_labels, batch, m_classes,
                          m_loss.get(), static_cast<T*>(m_dptr.back()), m_flags.get() + kBadLabel,
                          s);
  });
}

void CudaNetwork::download_losses(int batch) {
  const cudaStream_t s = m_stream.get();
  SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(m_h_loss.get(), m_loss.get(),
                                     static_cast<std::size_t>(batch) * sizeof(double),
                                     cudaMemcpyDeviceToHost, s));
  SYNCOPT_CHECK_CUDA(
      cudaMemcpyAsync(m_h_flags.get(), m_flags.get(), m_flags.nbytes(), cudaMemcpyDeviceToHost, s));
}

// The step's one host wait; then the loss (read_loss).
float CudaNetwork::finish_loss(const std::int32_t* labels, int batch, bool* grad_finite) {
  wait_stream(m_stream.get(), m_options.sync_timeout_s, "a training step");
  return read_loss(labels, batch, grad_finite);
}

// The mean loss of the downloaded per-example losses, summed in example
// order, and (grad_finite non-null) whether the gradient was finite; a bad
// label is a DataError.
float CudaNetwork::read_loss(const std::int32_t* labels, int batch, bool* grad_finite) const {
  if (m_h_flags.get()[kBadLabel] != 0) throw_bad_label(labels, batch);
  if (grad_finite != nullptr) *grad_finite = m_h_flags.get()[kNonFinite] == 0;
  double total = 0.0;
  for (int r = 0; r < batch; ++r) total += m_h_loss.get()[r];
  return static_cast<float>(total / batch);
}

void CudaNetwork::throw_bad_label(const std::int32_t* labels, int batch) const {
  for (int r = 0; r < batch; ++r) {
    if (labels[r] < 0 || labels[r] >= m_classes) {
      throw DataError("label " + std::to_string(labels[r]) + " of example " + std::to_string(r) +
                      " is outside [0, " + std::to_string(m_classes) +
                      "); the dataset's class count does not match the model");
    }
  }
  throw InternalError("the GPU saw a label outside [0, classes) that the host copy does not have");
}

}  // namespace syncopt::cuda::net
