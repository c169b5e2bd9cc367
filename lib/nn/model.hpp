// Models, backend-independent: the model spec of a config, the flat
// parameter layout with per-layer views, seeded initialisation and the
// printable summary, all derived from the model's graph (nn/graph.hpp), so
// every rank and backend has the same layout and initial values for
// (ModelSpec, seed).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nn/layer.hpp"

namespace syncopt::nn {

// The models: built-in graphs, or a description (custom). One table of
// names, which config's model.name parses (config/enums.hpp).
enum class Builtin { kCnn, kMlp, kLogreg, kResnet20, kResnet18, kCustom };
inline constexpr std::array<std::pair<Builtin, std::string_view>, 6> kBuiltinNames{{
    {Builtin::kCnn, "cnn"},
    {Builtin::kMlp, "mlp"},
    {Builtin::kLogreg, "logreg"},
    {Builtin::kResnet20, "resnet20"},
    {Builtin::kResnet18, "resnet18"},
    {Builtin::kCustom, "custom"},
}};
constexpr std::string_view builtin_name(Builtin b) {
  for (const auto& [value, name] : kBuiltinNames) {
    if (value == b) return name;
  }
  return "?";
}

// The arithmetic of a network's compute (compute.precision): FP32, or bf16
// data with FP32 accumulation where the library allows it (docs/design.md
// §5). Parameters and gradients at the network's interface are FP32 either way.
enum class Precision { kFp32, kBf16 };

struct ModelSpec {
  Builtin model = Builtin::kCnn;
  std::string name() const { return std::string(builtin_name(model)); }
  int channels = 1, height = 28, width = 28;
  int classes = 10;
  bool weight_norm = true;  // cnn, mlp, logreg: on every conv / fc layer
  int mlp_hidden = 128;
  std::vector<LayerDesc> layers;  // custom: the description
};

// What a parameter tensor is: initialisation follows it.
enum class ParamRole { kWeight, kDirection, kGain, kBias, kScale, kShift };

// One named parameter tensor inside the flat buffer.
struct ParamView {
  std::string name;                 // e.g. "conv1.v", "conv1.g", "conv1.b", "fc2.w"
  std::size_t offset = 0;           // in floats
  std::size_t count = 0;            // in floats
  std::vector<std::int64_t> shape;  // e.g. {32, 1, 3, 3} (OIHW), {256, 3136} (out, in)
  ParamRole role = ParamRole::kWeight;
};

struct ParamLayout {
  std::vector<ParamView> views;
  std::size_t count = 0;                                 // total floats
  const ParamView& find(const std::string& name) const;  // throws InternalError if absent
};

// The deterministic parameter layout of a model (same on every rank/backend):
// its graph's (nn/graph.hpp). Throws ConfigError for a model that does not fit.
ParamLayout param_layout(const ModelSpec& spec);

// Seeded initialisation of all parameters (nn/graph.hpp's init_params);
// InternalError if `layout` is not the model's.
void init_params(const ModelSpec& spec, const ParamLayout& layout, float* params,
                 std::uint64_t seed);

// Human-readable, multi-line summary of a model: one line per layer with its
// output shape, parameter count and FLOPs, then the totals (--dry-run).
std::string model_summary(const ModelSpec& spec);

}  // namespace syncopt::nn
