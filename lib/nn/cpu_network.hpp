// The CPU (oneDNN) network: a model is lowered to a short list of layers
// (conv3x3 / maxpool2x2 / fc / relu, then softmax cross-entropy), and
// CpuNetwork runs that list with oneDNN primitives cached per batch size.
// The layer list is public so that the tests can gradient-check each layer
// on its own (and w.r.t. its input).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/backend.hpp"

namespace syncopt::nn::cpu {

enum class LayerKind { kConv3x3, kMaxPool2x2, kFc, kRelu };

struct LayerSpec {
  LayerKind kind = LayerKind::kFc;
  std::string name;   // parameter prefix ("conv1", "fc2"); empty for pool / relu
  int out = 0;        // output channels (conv) or units (fc)
  bool relu = false;  // a ReLU fused after this conv / fc
};

// Input C x H x W, the layers in order, and whether every conv / fc layer is
// weight-normalised. The softmax cross-entropy runs over the last layer's
// output flattened per example (NCHW order): its size is the class count.
struct NetSpec {
  int channels = 1, height = 28, width = 28;
  bool weight_norm = true;
  std::vector<LayerSpec> layers;
};

// The layer list of a model (throws ConfigError for an unknown model or bad
// sizes).
NetSpec net_spec(const ModelSpec& spec);

// Parameter layout of a layer list: for each conv / fc layer in order,
// "<name>.v", "<name>.g", "<name>.b" (weight norm) or "<name>.w", "<name>.b".
ParamLayout param_layout(const NetSpec& net);

// Output shape of each layer without the batch dimension: {C, H, W} after a
// conv / pool / relu on images, {units} after an fc.
std::vector<std::vector<std::int64_t>> layer_output_shapes(const NetSpec& net);

// Number of outputs per example of the last layer (= classes).
std::int64_t output_count(const NetSpec& net);

class CpuNetwork final : public Network {
 public:
  // threads: OpenMP threads for oneDNN and the loops (0: leave the OpenMP
  // default). Throws ConfigError for max_batch < 1.
  CpuNetwork(NetSpec net, int max_batch, int threads);
  ~CpuNetwork() override;
  CpuNetwork(const CpuNetwork&) = delete;
  CpuNetwork& operator=(const CpuNetwork&) = delete;

  float train_step(const float* params, const float* images, const std::int32_t* labels,
                   int batch, float* grad) override;
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
