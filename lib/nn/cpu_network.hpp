// The CPU (oneDNN) network: runs a model's layer list (nn/model.hpp:
// conv3x3 / maxpool2x2 / fc / relu, then softmax cross-entropy) with oneDNN
// primitives cached per batch size. Any layer list can be built, so that the
// tests can gradient-check each layer on its own (and w.r.t. its input).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/backend.hpp"
#include "nn/model.hpp"

namespace syncopt::nn::cpu {

class CpuNetwork final : public Network {
 public:
  // threads: OpenMP threads for oneDNN and the loops (0: leave the OpenMP
  // default). Throws ConfigError for max_batch < 1.
  CpuNetwork(NetSpec net, int max_batch, int threads);
  ~CpuNetwork() override;
  CpuNetwork(const CpuNetwork&) = delete;
  CpuNetwork& operator=(const CpuNetwork&) = delete;

  float train_step(const float* params, const float* images, const std::int32_t* labels, int batch,
                   float* grad) override;
  // train_step that also writes dL/dimages [batch, C, H, W] into input_grad
  // (for the layer-wise gradient checks; the trainer never needs it).
  float train_step_with_input_grad(const float* params, const float* images,
                                   const std::int32_t* labels, int batch, float* grad,
                                   float* input_grad);
  void predict(const float* params, const float* images, int batch, float* logits) override;
  int max_batch() const override;

  const ParamLayout& layout() const;
  // oneDNN implementation chosen for every primitive of the plan of `batch`
  // (e.g. "conv1 fwd: jit:avx2"); builds that plan. For checks and benchmarks.
  std::vector<std::string> implementations(int batch);

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

}  // namespace syncopt::nn::cpu
