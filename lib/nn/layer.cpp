// The table of layer kinds (see layer.hpp): names and config attributes.
#include "nn/layer.hpp"

namespace syncopt::nn {

namespace {

using T = LayerType;

// In LayerType order; the static_assert below fails when a kind is added
// to the enum without its row here, or in another place.
constexpr std::array<LayerKind, kLayerTypeCount> kLayerKinds = {{
    {T::kConv, "conv", {"out", "kernel", "stride", "pad", "bias", "weight_norm"}},
    {T::kBatchNorm, "bn", {"eps"}},
    {T::kRelu, "relu", {}},
    {T::kAdd, "add", {"from", "shortcut"}},
    {T::kMaxPool, "maxpool", {"kernel", "stride", "pad"}},
    {T::kAvgPool, "avgpool", {"kernel", "stride", "pad"}},
    {T::kGlobalAvgPool, "gap", {}},
    {T::kFc, "fc", {"out", "bias", "weight_norm"}},
    {T::kDropout, "dropout", {"rate"}},
    {T::kFlatten, "flatten", {}},
    {T::kGelu, "gelu", {}},
}};
static_assert(in_layer_type_order(kLayerKinds), "kLayerKinds must list every LayerType in order");

}  // namespace

const std::array<LayerKind, kLayerTypeCount>& layer_kinds() { return kLayerKinds; }

const std::vector<std::string_view>& layer_type_names() {
  static const std::vector<std::string_view> kNames = [] {
    std::vector<std::string_view> names;
    for (const LayerKind& k : kLayerKinds) names.push_back(k.name);
    return names;
  }();
  return kNames;
}

std::string_view layer_type_name(LayerType type) {
  return kLayerKinds[static_cast<std::size_t>(type)].name;
}

std::optional<LayerType> layer_type_from_name(std::string_view name) {
  for (const LayerKind& k : kLayerKinds) {
    if (k.name == name) return k.type;
  }
  return std::nullopt;
}

std::vector<std::string_view> layer_attributes(LayerType type) {
  std::vector<std::string_view> out;
  for (const std::string_view a : kLayerKinds[static_cast<std::size_t>(type)].attributes) {
    if (!a.empty()) out.push_back(a);
  }
  return out;
}

}  // namespace syncopt::nn
