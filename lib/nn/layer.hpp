// The layers a model description is made of (nn/graph.hpp derives the
// graph from them): their types, config names and attributes. Plain data, so
// that the config can hold a model's layer list without the graph code.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace syncopt::nn {

enum class LayerType {
  kConv,           // convolution: out channels, kernel, stride, pad, bias, weight_norm
  kBatchNorm,      // batch normalisation over N, H, W per channel: scale and shift
  kRelu,           //
  kAdd,            // residual: the previous output + the output of layer `from`
  kMaxPool,        // kernel, stride, pad
  kAvgPool,        // kernel, stride, pad; padding counts as zeros (PyTorch's default)
  kGlobalAvgPool,  // C x H x W -> C x 1 x 1
  kFc,             // fully connected: out units (0 = the class count), bias, weight_norm
  kDropout,        // zeroes each value with probability `rate` in training
  kFlatten,        // C x H x W -> C*H*W, NCHW order
};

enum class Shortcut {
  kIdentity,    // shapes must agree
  kProjection,  // a 1x1 convolution (no bias) and a batch norm on the `from` side, stride
                // taken from the shapes
};

// The config names of the layer types ("conv", "bn", ...), in LayerType order.
const std::vector<std::string_view>& layer_type_names();
std::string_view layer_type_name(LayerType type);
std::optional<LayerType> layer_type_from_name(std::string_view name);

// One layer of a description. Fields that do not apply to its type keep
// their defaults (the config parser rejects them when written).
struct LayerDesc {
  LayerType type = LayerType::kFc;
  std::string name;          // "" = "<type><position>", e.g. "relu4" (positions from 1)
  std::int64_t out = 0;      // conv: output channels (>= 1); fc: units, 0 = the class count
  std::int64_t kernel = 0;   // conv, maxpool, avgpool: 0 = 3 (conv) or 2 (pooling)
  std::int64_t stride = 0;   // 0 = 1 (conv) or the kernel (pooling)
  std::int64_t pad = 0;      // zeros (conv, avgpool) or -inf (maxpool) on each side
  bool bias = true;          // conv, fc
  bool weight_norm = false;  // conv, fc: w = g v / ||v|| per output unit
  std::string from;          // add: the earlier layer added, or "input"
  Shortcut shortcut = Shortcut::kIdentity;  // add
  double rate = 0.5;                        // dropout: probability of zeroing, in [0, 1)
  double eps = 1e-5;                        // bn: added to the variance

  bool operator==(const LayerDesc&) const = default;
};

}  // namespace syncopt::nn
