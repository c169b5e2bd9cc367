// The CUDA network's passes (see network.cpp): the forward and backward
// walks over the graph (nn/walk.hpp), each node run by its kind's function
// (kinds.hpp); prediction and the batch-norm statistics.
#include <cstring>

#include "common/error.hpp"
#include "cuda_network.hpp"
#include "syncopt_cuda/check.hpp"
#include "syncopt_cuda/kernels.hpp"
#include "syncopt_cuda/sync.hpp"

namespace syncopt::cuda::net {

Pass CudaNetwork::make_pass(Plan& plan, Mode mode, const float* P, float* G, const void* x0,
                            void* dinput) const {
  Pass ps;
  ps.plan = &plan;
  ps.numerics = m_numerics;
  ps.cudnn = m_cudnn.get();
  ps.cublas = m_cublas.get();
  ps.stream = m_stream.get();
  ps.workspace = m_workspace.get();
  ps.workspace_nbytes = m_workspace.nbytes();
  ps.bias_scratch = m_bias_scratch.get();
  ps.scratch = m_scratch.get();
  ps.batch = plan.batch;
  ps.mode = mode;
  ps.P = P;
  ps.G = G;
  ps.x0 = x0;
  ps.dinput = dinput;
  ps.step_key = m_step_key;
  ps.t = &m_tptr;
  ps.dptr = &m_dptr;
  ps.grads = &m_gradients;
  return ps;
}

void CudaNetwork::forward_node(const Pass& ps, std::size_t j) {
  ops(j).forward(ps, m_nodes[j], ps.plan->nodes[j], j);
}

void CudaNetwork::backward_node(const Pass& ps, std::size_t j) {
  NodeRt& r = m_nodes[j];
  if (r.node->relu) {
    with_type(ps.numerics, [&]<class T>() {
      relu_backward(ps.output<const T>(j), ps.doutput<const T>(j), ps.out_count(r),
                    ps.doutput<T>(j), ps.stream);
    });
  }
  ops(j).backward(ps, r, ps.plan->nodes[j], j);
}

void CudaNetwork::forward(Plan& plan, Mode mode, const float* P, const float* host_params,
                          const void* x0) {
  const Pass ps = make_pass(plan, mode, P, nullptr, x0, nullptr);
  nn::walk_forward(m_graph, nullptr, [&](std::size_t j) {
    if (m_nodes[j].has_params && host_params != nullptr) upload_node(m_nodes[j], host_params);
    forward_node(ps, j);
  });
}

void CudaNetwork::backward(Plan& plan, const float* P, float* G, bool download, const void* x0,
                           void* dinput) {
  const Pass ps = make_pass(plan, Mode::kTrain, P, G, x0, dinput);
  nn::walk_backward(
      m_graph, [&](std::size_t j) { backward_node(ps, j); },
      [&](std::size_t j) {
        if (download) download_node(m_nodes[j]);
      });
}

void CudaNetwork::predict(const float* params, const float* images, int batch, float* logits) {
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
  forward(plan, Mode::kInfer, m_params.get(), params, input_of(in));
  SYNCOPT_CHECK_CUDA(cudaEventRecord(in.read.get(), s));
  const std::size_t n = static_cast<std::size_t>(batch) * static_cast<std::size_t>(m_classes);
  const float* logits32 = static_cast<const float*>(m_tptr.back());
  if (m_numerics.bf16) {
    convert(static_cast<const __nv_bfloat16*>(m_tptr.back()), n, m_logits32.get(), s);
    logits32 = m_logits32.get();
  }
  SYNCOPT_CHECK_CUDA(
      cudaMemcpyAsync(m_h_logits.get(), logits32, n * sizeof(float), cudaMemcpyDeviceToHost, s));
  wait_stream(s, m_options.sync_timeout_s, "predict");
  std::memcpy(logits, m_h_logits.get(), n * sizeof(float));
}

void CudaNetwork::set_batch_norm_statistics(const float* params, const float* images, int batch,
                                            int batches) {
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
    forward(plan, Mode::kStatistics, m_params.get(), b == 0 ? params : nullptr, input_of(in));
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

}  // namespace syncopt::cuda::net
