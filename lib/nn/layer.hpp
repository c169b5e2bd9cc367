// The layers a model description is made of (nn/graph.hpp derives the
// graph from them): their types, config names and attributes. Plain data, so
// that the config can hold a model's layer list without the graph code.
//
// A new layer kind goes at the END of LayerType (checkpoints and tests name
// kinds, never their numbers, but the per-kind tables below and in each
// backend list the kinds in enum order and check it at compile time), with
// a row in kLayerKinds (layer.cpp), its shape rule in graph.cpp, one
// function per stage in each backend's table (lib/nn/cpu/, cuda/src/network/)
// and a row in the gradient-check cases (tests/common/layer_cases.hpp).
#pragma once

#include <array>
#include <cstddef>
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
  kGelu,           // x * Phi(x), Phi the standard normal CDF (the exact, erf form)
};

// The number of kinds: the last enumerator + 1.
inline constexpr std::size_t kLayerTypeCount = static_cast<std::size_t>(LayerType::kGelu) + 1;

// What a description says about one kind: its config name and the
// attributes its [[model.layers]] table takes besides `type` and `name`.
struct LayerKind {
  LayerType type;
  std::string_view name;
  std::array<std::string_view, 6> attributes;  // "" after the last
};

// Every kind, in LayerType order (checked at compile time in layer.cpp).
const std::array<LayerKind, kLayerTypeCount>& layer_kinds();

// Whether `table`, an array of rows with a `type`, lists every kind once in
// LayerType order: the per-kind tables of the backends static_assert it, so
// a kind inserted mid-enum or left out fails to compile.
template <class Row, std::size_t N>
constexpr bool in_layer_type_order(const std::array<Row, N>& table) {
  if (N != kLayerTypeCount) return false;
  for (std::size_t i = 0; i < N; ++i) {
    if (table[i].type != static_cast<LayerType>(i)) return false;
  }
  return true;
}

// The config names of the layer types ("conv", "bn", ...), in LayerType order.
const std::vector<std::string_view>& layer_type_names();
std::string_view layer_type_name(LayerType type);
std::optional<LayerType> layer_type_from_name(std::string_view name);
// The attributes `type` takes besides `type` and `name`, in the config's order.
std::vector<std::string_view> layer_attributes(LayerType type);

enum class Shortcut {
  kIdentity,    // shapes must agree
  kProjection,  // a 1x1 convolution (no bias) and a batch norm on the `from` side, stride
                // taken from the shapes
};

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
