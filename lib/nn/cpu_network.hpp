// The CPU (oneDNN) network: runs a model's layer graph (nn/graph.hpp:
// convolution, batch norm, ReLU, residual add, max / average / global
// average pooling, fully connected, dropout, flatten; then softmax
// cross-entropy) with oneDNN primitives cached per batch size. Any graph can
// be built, so that the tests can gradient-check each layer on its own (and
// w.r.t. its input).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "nn/backend.hpp"
#include "nn/graph.hpp"

namespace syncopt::nn::cpu {

class CpuNetwork final : public Network {
 public:
  // threads: OpenMP threads for oneDNN and the loops (0: leave the OpenMP
  // default). Throws ConfigError for max_batch < 1.
  // precision: the compute's arithmetic (bf16 needs AVX-512; see make_cpu_backend).
  CpuNetwork(Graph graph, int max_batch, int threads, Precision precision = Precision::kFp32);
  ~CpuNetwork() override;
  CpuNetwork(const CpuNetwork&) = delete;
  CpuNetwork& operator=(const CpuNetwork&) = delete;

  float train_step(const float* params, const float* images, const std::int32_t* labels, int batch,
                   float* grad) override;
  // Staged: hooks.need_params before every layer's forward (in order),
  // hooks.grads_ready after every layer's backward (top layer first).
  float train_step_staged(const float* params, const float* images, const std::int32_t* labels,
                          int batch, float* grad, StepHooks& hooks) override;
  // train_step that also writes dL/dimages [batch, C, H, W] into input_grad
  // (for the layer-wise gradient checks; the trainer never needs it).
  float train_step_with_input_grad(const float* params, const float* images,
                                   const std::int32_t* labels, int batch, float* grad,
                                   float* input_grad);
  // The loss train_step would return, by its forward pass alone (batch
  // statistics, dropout drawn as train_step draws it): the function whose
  // gradient train_step computes, for finite differences.
  double train_loss(const float* params, const float* images, const std::int32_t* labels,
                    int batch);
  void predict(const float* params, const float* images, int batch, float* logits) override;
  bool has_batch_norm() const override;
  void set_batch_norm_statistics(const float* params, const float* images, int batch,
                                 int batches) override;
  int max_batch() const override;
  // The statistics the last set_batch_norm_statistics() gave batch-norm node
  // `node` (its index in graph().nodes): per channel the mean and the biased
  // variance predict() normalises with (InternalError before any, or for a
  // node that is no batch norm). For exporting a model (train/weights.hpp).
  void batch_norm_statistics(int node, std::vector<float>& mean, std::vector<float>& var) const;

  // Dropout masks are drawn from a key; by default the key is a hash of the
  // batch (images and labels), so a resumed or repeated step draws the same
  // masks without any state. A fixed key (the tests) overrides it.
  void set_dropout_key(std::optional<std::uint64_t> key);

  const ParamLayout& layout() const;
  const Graph& graph() const;
  // oneDNN implementation chosen for every primitive of the training plan of
  // `batch` (e.g. "conv1 fwd: jit:avx2"); builds that plan. For checks and
  // benchmarks.
  std::vector<std::string> implementations(int batch);

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace syncopt::nn::cpu
