// CudaBackend / CudaNetwork: a model's layer graph (nn/graph.hpp: the same
// nodes, shapes, parameter views and groups the CPU backend runs, derived
// once in lib/nn) on one GPU, activations in NCHW. This file is the walk
// (nn/walk.hpp: which node when, who writes a gradient and who adds, the
// hooks), the plans, the transfers and the entry points; how each layer kind
// runs is one function per kind and stage (kinds.hpp):
// - convolution (any kernel, stride, padding; forward, backward-data,
//   backward-filter; the algorithms chosen once per batch size), max and
//   average pooling, global average pooling and batch normalisation
//   (training forward with the batch's statistics, backward, inference with
//   set statistics) through cuDNN;
// - fully connected layers through cuBLAS sgemm;
// - the kernels of kernels.cu for bias + ReLU, the bias gradient, ReLU and
//   GELU, the residual add, dropout (the CPU backend's masks:
//   nn/dropout.hpp), weight normalisation, the precise batch-norm statistics
//   and the softmax cross-entropy.
// A ReLU the graph fused into a conv / fc / batch norm / add runs on that
// node's output in place; its backward masks the output gradient in place
// with the stored output.
//
// Three ways in:
// - train_step_device (DeviceNetwork): parameters and gradient are device
//   buffers of the caller (the CudaReplica); only the images and labels go
//   up, and the per-example losses and two flags (a bad label, and -- when
//   asked -- a non-finite gradient) come down: one host wait per step.
// - train_step / predict / set_batch_norm_statistics (nn::Network, host
//   pointers; evaluation): the parameters go up and the gradient comes down
//   every call, so the transfers are pipelined with the compute on a second
//   (copy) stream, node by node (one parameter group, nn::Graph::groups,
//   each), ordered by events: a node's parameters are staged into pinned
//   memory and copied up while the nodes before it compute, and its
//   gradient is copied down (and unstaged by the host) while the backward
//   pass goes on below it. The host waits only for the pieces.
// - train_step_staged (nn::Network; the parameter-server workers' pipelined
//   exchange): the same transfers, driven by the hooks as
//   syncopt_cuda/staged.hpp lays out: each layer's parameters asked for
//   just before its upload, each gradient group reported once it is on the
//   host.
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
// Numerics (rt.hpp's Numerics, from CudaOptions): FP32 by default and
// strictly (convolutions in CUDNN_FMA_MATH, cublasGemmEx with
// CUBLAS_COMPUTE_32F: no TF32), TF32 tensor cores with compute.tf32; or, with
// compute.precision = bf16, activations and their gradients in bf16 through
// cuDNN's tensor-op math and cuBLAS with FP32 compute, the weights converted
// from the FP32 master copy each step, a convolution's weight gradient
// widened from bf16 into FP32 and an fc's written in FP32, batch-norm
// statistics, the loss and the softmax in FP32. FP32 results equal the CPU
// backend's within float rounding, bf16 results its bf16 ones within
// bf16's. With CudaOptions::deterministic (compute.deterministic) the
// convolution algorithms are picked by cuDNN's heuristics among the
// deterministic ones, without timing, and every other kernel is
// deterministic, so two runs agree bit for bit.
//
// Every wait of the host for the GPU's work is bounded by
// CudaOptions::sync_timeout_s (sync.hpp). A CudaNetwork is not thread-safe.
#include <spdlog/spdlog.h>

#include <chrono>

#include "common/error.hpp"
#include "cuda_network.hpp"
#include "syncopt_cuda/check.hpp"
#include "syncopt_cuda/sync.hpp"

namespace syncopt::cuda::net {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void set_desc(TensorDesc& d, int batch, const Chw& t, cudnnDataType_t dt) {
  SYNCOPT_CHECK_CUDNN(
      cudnnSetTensor4dDescriptor(d.get(), CUDNN_TENSOR_NCHW, dt, batch, t.c, t.h, t.w));
}

}  // namespace

CudaNetwork::CudaNetwork(nn::Graph graph, int max_batch, int device, const CudaOptions& options)
    : m_graph(std::move(graph)),
      m_options(options),
      m_max_batch(checked_batch(max_batch)),
      m_device(activate(device)) {
  m_classes = static_cast<int>(m_graph.outputs);
  SYNCOPT_CHECK_CUBLAS(cublasSetStream(m_cublas.get(), m_stream.get()));
  // FP32 sgemm stays FP32 in the default mode (no TF32); said explicitly.
  SYNCOPT_CHECK_CUBLAS(cublasSetMathMode(m_cublas.get(), CUBLAS_DEFAULT_MATH));
  SYNCOPT_CHECK_CUDNN(cudnnSetStream(m_cudnn.get(), m_stream.get()));
  m_gradients = nn::plan_gradients(m_graph, true);
  build_nodes();
  allocate_buffers();
}

CudaNetwork::~CudaNetwork() {
  // Nothing may still run on the streams when the buffers are freed; a
  // bounded wait, and nothing thrown from here.
  try {
    (void)cudaSetDevice(m_device);
    wait_stream(m_copy.get(), m_options.sync_timeout_s, "the network's teardown");
    wait_stream(m_stream.get(), m_options.sync_timeout_s, "the network's teardown");
  } catch (...) {
  }
}

int CudaNetwork::checked_batch(int max_batch) {
  if (max_batch < 1) {
    throw ConfigError("network max batch must be >= 1, got " + std::to_string(max_batch));
  }
  return max_batch;
}

int CudaNetwork::activate(int device) {
  SYNCOPT_CHECK_CUDA(cudaSetDevice(device));
  return device;
}

// ---- the node table and the plans --------------------------------------------

// The node table: everything from the graph's nodes and parameter views;
// cuDNN descriptors for the geometry the graph fixed (each kind's setup).
void CudaNetwork::build_nodes() {
  const std::size_t count = m_graph.nodes.size();
  if (count == 0) throw ConfigError("a model needs at least one layer");
  m_nodes.resize(count);
  Setup setup;
  setup.numerics = m_numerics;
  setup.layout = &m_graph.layout;
  setup.max_batch = m_max_batch;
  std::size_t next_param = 0;  // the groups tile the layout in node order
  for (std::size_t j = 0; j < count; ++j) {
    NodeRt& r = m_nodes[j];
    const nn::Node& node = m_graph.nodes[j];
    r.node = &node;
    r.in = chw_of(node.in);
    r.out = chw_of(node.out);
    if (ops(j).setup != nullptr) ops(j).setup(r, setup);
    if (node.param_count == 0) continue;
    r.has_params = true;
    r.p_lo = node.param_offset;
    r.p_hi = node.param_offset + node.param_count;
    if (r.p_lo != next_param) {
      throw InternalError("the parameters of node '" + node.name +
                          "' are not the next contiguous range of the layout");
    }
    next_param = r.p_hi;
  }
  if (next_param != m_graph.layout.count) {
    throw InternalError("the nodes' parameters do not cover the parameter layout");
  }
  m_bias_scratch = DeviceBuffer<double>(setup.bias_scratch);
}

void CudaNetwork::allocate_buffers() {
  const std::size_t n = static_cast<std::size_t>(m_max_batch);
  const std::size_t layout_count = m_graph.layout.count;
  m_params = DeviceBuffer<float>(layout_count);
  m_h_params = PinnedBuffer<float>(layout_count);
  for (const NodeRt& r : m_nodes) {
    m_t.emplace_back(n * r.out.count() * m_numerics.element_nbytes());
    m_tptr.push_back(m_t.back().get());
  }
  const std::size_t in_per = input_per_example();
  for (InputSlot& in : m_in) {
    in.x = DeviceBuffer<float>(n * in_per);
    in.labels = DeviceBuffer<std::int32_t>(n);
    in.h_x = PinnedBuffer<float>(n * in_per);
    in.h_labels = PinnedBuffer<std::int32_t>(n);
    if (m_numerics.bf16) in.x16 = DeviceBuffer<__nv_bfloat16>(n * in_per);
  }
  m_loss = DeviceBuffer<double>(n);
  m_flags = DeviceBuffer<int>(kFlagCount);
  m_h_logits = PinnedBuffer<float>(n * static_cast<std::size_t>(m_classes));
  if (m_numerics.bf16) m_logits32 = DeviceBuffer<float>(n * static_cast<std::size_t>(m_classes));
  m_h_loss = PinnedBuffer<double>(n);
  m_h_flags = PinnedBuffer<int>(kFlagCount);
}

Plan& CudaNetwork::plan_for(int batch, bool backward) {
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

void CudaNetwork::ensure_workspace(std::size_t nbytes) {
  if (nbytes <= m_workspace.nbytes()) return;
  // The old workspace may be in use by queued work.
  wait_stream(m_stream.get(), m_options.sync_timeout_s, "a cuDNN workspace resize");
  m_workspace = DeviceBuffer<unsigned char>();
  m_workspace = DeviceBuffer<unsigned char>(nbytes);
}

Plan CudaNetwork::build_forward(int batch) {
  const auto t0 = std::chrono::steady_clock::now();
  Plan plan;
  plan.batch = batch;
  plan.nodes.resize(m_nodes.size());
  Planner planner{m_numerics, m_cudnn.get(), &m_options, batch, 0, ""};
  for (std::size_t j = 0; j < m_nodes.size(); ++j) {
    NodePlan& np = plan.nodes[j];
    set_desc(np.x, batch, m_nodes[j].in, m_numerics.data());
    set_desc(np.y, batch, m_nodes[j].out, m_numerics.data());
    if (ops(j).plan_forward != nullptr) ops(j).plan_forward(planner, m_nodes[j], np);
  }
  ensure_workspace(planner.workspace_nbytes);
  spdlog::debug("cuda: batch {} forward plan in {:.1f} ms ({} algorithms):{}", batch,
                1e3 * seconds_since(t0), m_options.deterministic ? "heuristic" : "timed",
                planner.algorithms);
  return plan;
}

void CudaNetwork::build_backward(Plan& plan) {
  const auto t0 = std::chrono::steady_clock::now();
  Planner planner{m_numerics, m_cudnn.get(), &m_options, plan.batch, 0, ""};
  for (std::size_t j = 0; j < m_nodes.size(); ++j) {
    if (ops(j).plan_backward != nullptr) ops(j).plan_backward(planner, m_nodes[j], plan.nodes[j]);
  }
  ensure_workspace(planner.workspace_nbytes);
  if (m_dptr.empty()) make_gradient_buffers();
  plan.has_backward = true;
  spdlog::debug("cuda: batch {} backward plan in {:.1f} ms ({} algorithms):{}", plan.batch,
                1e3 * seconds_since(t0), m_options.deterministic ? "heuristic" : "timed",
                planner.algorithms);
}

// The gradient buffers exist once a network trains (evaluation-only
// networks never pay for them): one per node that owns one (an add's lone
// input 0 uses the add's), dL/d(the node's output).
void CudaNetwork::make_gradient_buffers() {
  const std::size_t n = static_cast<std::size_t>(m_max_batch);
  const std::size_t count = m_nodes.size();
  m_d.resize(count);
  for (std::size_t j = 0; j < count; ++j) {
    if (m_gradients.buffer[j] == static_cast<int>(j)) {
      m_d[j] =
          DeviceBuffer<unsigned char>(n * m_nodes[j].out.count() * m_numerics.element_nbytes());
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
    if (r.node->type == nn::LayerType::kBatchNorm && r.node->inputs[0] == nn::kGraphInput) {
      scratch = std::max(scratch, n * r.in.count());
    }
  }
  m_scratch = DeviceBuffer<unsigned char>(scratch * m_numerics.element_nbytes());
  m_grad = DeviceBuffer<float>(m_graph.layout.count);
  m_h_grad = PinnedBuffer<float>(m_graph.layout.count);
}

}  // namespace syncopt::cuda::net
