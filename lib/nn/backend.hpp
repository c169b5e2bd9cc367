// The compute interface: a Backend builds an executable Network for a model
// (nn/model.hpp, run as its graph, nn/graph.hpp) and a batch size. CpuBackend (oneDNN) is the
// reference and the test oracle; the CUDA backend lives in cuda/. No MPI here: compute knows
// nothing of ranks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/model.hpp"

namespace syncopt::nn {

// The pipelined exchange (docs/design.md §4) follows a training step as it
// runs: it is asked for each layer's parameters just before that layer's
// forward, and told as soon as backward has finished each layer's gradient
// (top layer first), so that parameters arrive and gradients leave while the
// rest of the step computes. Offsets and counts are in floats of the flat
// parameter buffer; a layer's parameters are one contiguous group
// (nn::Graph::groups).
class StepHooks {
 public:
  explicit StepHooks(std::size_t param_count) : m_param_count(param_count) {}
  virtual ~StepHooks() = default;
  std::size_t param_count() const { return m_param_count; }
  // Returns once params[offset, offset + count) hold this step's values.
  virtual void need_params(std::size_t offset, std::size_t count) = 0;
  // grad[offset, param_count()) is final and will not be written again in
  // this step; `loss` is the step's (what train_step returns).
  virtual void grads_ready(std::size_t offset, float loss) = 0;

 private:
  std::size_t m_param_count;
};

class Network {
 public:
  virtual ~Network() = default;
  // images [batch, C, H, W] float32, labels [batch] int32 in [0, classes),
  // params and grad [layout.count]. Returns the mean softmax cross-entropy
  // over the batch and writes its gradient w.r.t. params into grad
  // (overwritten, not accumulated). batch <= max_batch().
  virtual float train_step(const float* params, const float* images, const std::int32_t* labels,
                           int batch, float* grad) = 0;
  // train_step, reporting its progress to `hooks` (see StepHooks); the same
  // loss and gradient bits as train_step. This default, for a backend
  // without a staged step, asks for every parameter first, runs the whole
  // step, then reports the whole gradient at once.
  virtual float train_step_staged(const float* params, const float* images,
                                  const std::int32_t* labels, int batch, float* grad,
                                  StepHooks& hooks) {
    hooks.need_params(0, hooks.param_count());
    const float loss = train_step(params, images, labels, batch, grad);
    hooks.grads_ready(0, loss);
    return loss;
  }
  // Forward only, in inference mode: logits [batch, classes]. batch <=
  // max_batch(). A model with batch norm normalises with the statistics of
  // the last set_batch_norm_statistics() (InternalError before any).
  virtual void predict(const float* params, const float* images, int batch, float* logits) = 0;
  virtual int max_batch() const = 0;
  // Batch norm: train_step normalises with each batch's own statistics;
  // predict needs population statistics that belong to the parameters it
  // is given. This sets them to those of `params` over `batches` batches of
  // `batch` examples at `images` ([batches * batch, C, H, W], forward in
  // training mode; per channel the mean and the biased variance of all the
  // examples, accumulated in double). A no-op for a model without batch norm.
  virtual bool has_batch_norm() const { return false; }
  virtual void set_batch_norm_statistics(const float* params, const float* images, int batch,
                                         int batches) {}
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual std::unique_ptr<Network> make_network(const ModelSpec& spec, int max_batch) = 0;
};

// The CPU backend (oneDNN), the reference and the test oracle. `threads`:
// OpenMP threads of the compute (0 = the OpenMP default); ConfigError if < 0.
// Other backends (CUDA, in cuda/) are chosen by the one factory in
// apps/syncopt/platform.cpp.
std::unique_ptr<Backend> make_cpu_backend(int threads, Precision precision = Precision::kFp32);

// Whether oneDNN can run compute.precision = "bf16" on this CPU: it needs
// AVX-512 (AVX512-BF16 or AMX natively, or emulated on plain AVX-512); an
// AVX2-only CPU (AMD Zen 3, older Intel) cannot, and make_cpu_backend
// refuses bf16 there with a ConfigError.
bool cpu_runs_bf16();

// "oneDNN 3.2.0, cpu isa avx512_core_amx (AMX ...)": the library the CPU
// backend runs on and the instruction set it dispatches to here (syncopt
// --version, run.json, the benchmarks).
std::string cpu_backend_description();

}  // namespace syncopt::nn
