// Models as layer lists, their flat parameter layout, seeded initialisation
// and the printable summary. Backend-independent: every rank and backend
// derives the same layout and initial values from (ModelSpec, seed).
//
// Layout order (fixed; a checkpoint / wire format depends on it): layers in
// network order; per conv / fc layer "<name>.v", "<name>.g", "<name>.b" with
// weight norm, "<name>.w", "<name>.b" without. Conv weights OIHW
// [out, in, 3, 3]; fc weights [out, in] with `in` in NCHW-flatten order.
//   cnn:    conv1(32) relu pool, conv2(64) relu pool, fc1(256) relu, fc2(classes)
//   mlp:    fc1(mlp_hidden) relu, fc2(classes)
//   logreg: fc1(classes)
#include "nn/model.hpp"

#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>
#include <sstream>
#include <string>

#include "common/error.hpp"

namespace syncopt::nn {

const ParamView& ParamLayout::find(const std::string& name) const {
  for (const ParamView& v : views) {
    if (v.name == name) return v;
  }
  throw InternalError("parameter view '" + name + "' does not exist in this model's layout");
}

NetSpec net_spec(const ModelSpec& spec) {
  if (spec.channels < 1 || spec.height < 1 || spec.width < 1) {
    throw ConfigError("model input must be at least 1x1x1, got " + std::to_string(spec.channels) +
                      "x" + std::to_string(spec.height) + "x" + std::to_string(spec.width));
  }
  if (spec.classes < 2) {
    throw ConfigError("model needs at least 2 classes, got " + std::to_string(spec.classes));
  }
  NetSpec net;
  net.channels = spec.channels;
  net.height = spec.height;
  net.width = spec.width;
  net.weight_norm = spec.weight_norm;
  using K = LayerKind;
  if (spec.name == "cnn") {
    if (spec.height < 4 || spec.width < 4) {
      throw ConfigError("model 'cnn' pools twice by 2 and needs images of at least 4x4, got " +
                        std::to_string(spec.height) + "x" + std::to_string(spec.width));
    }
    net.layers = {{K::kConv3x3, "conv1", 32, true}, {K::kMaxPool2x2, "", 0, false},
                  {K::kConv3x3, "conv2", 64, true}, {K::kMaxPool2x2, "", 0, false},
                  {K::kFc, "fc1", 256, true},       {K::kFc, "fc2", spec.classes, false}};
  } else if (spec.name == "mlp") {
    if (spec.mlp_hidden < 1) {
      throw ConfigError("model.mlp_hidden must be >= 1, got " + std::to_string(spec.mlp_hidden));
    }
    net.layers = {{K::kFc, "fc1", spec.mlp_hidden, true}, {K::kFc, "fc2", spec.classes, false}};
  } else if (spec.name == "logreg") {
    net.layers = {{K::kFc, "fc1", spec.classes, false}};
  } else {
    throw ConfigError("unknown model '" + spec.name + "'; use one of: cnn, mlp, logreg");
  }
  return net;
}

std::vector<std::vector<std::int64_t>> layer_output_shapes(const NetSpec& net) {
  std::vector<std::vector<std::int64_t>> shapes;
  std::vector<std::int64_t> cur = {net.channels, net.height, net.width};
  for (const LayerSpec& l : net.layers) {
    switch (l.kind) {
      case LayerKind::kConv3x3:
        if (cur.size() != 3) throw ConfigError("conv layer '" + l.name + "' after an fc layer");
        cur[0] = l.out;
        break;
      case LayerKind::kMaxPool2x2:
        if (cur.size() != 3 || cur[1] < 2 || cur[2] < 2) {
          throw ConfigError("max-pool needs an image input of at least 2x2");
        }
        cur[1] /= 2;
        cur[2] /= 2;
        break;
      case LayerKind::kFc:
        cur = {l.out};
        break;
      case LayerKind::kRelu:
        break;
    }
    shapes.push_back(cur);
  }
  return shapes;
}

std::int64_t output_count(const NetSpec& net) {
  std::int64_t n = net.channels * std::int64_t{net.height} * net.width;
  const auto shapes = layer_output_shapes(net);
  if (!shapes.empty()) {
    n = 1;
    for (std::int64_t d : shapes.back()) n *= d;
  }
  return n;
}

ParamLayout param_layout(const NetSpec& net) {
  ParamLayout layout;
  auto add = [&](const std::string& name, std::vector<std::int64_t> shape) {
    ParamView v;
    v.name = name;
    v.offset = layout.count;
    v.count = 1;
    for (std::int64_t d : shape) v.count *= static_cast<std::size_t>(d);
    v.shape = std::move(shape);
    layout.count += v.count;
    layout.views.push_back(std::move(v));
  };
  const auto shapes = layer_output_shapes(net);
  std::vector<std::int64_t> in = {net.channels, net.height, net.width};
  for (std::size_t i = 0; i < net.layers.size(); ++i) {
    const LayerSpec& l = net.layers[i];
    if (l.kind == LayerKind::kConv3x3 || l.kind == LayerKind::kFc) {
      std::vector<std::int64_t> wshape;
      if (l.kind == LayerKind::kConv3x3) {
        wshape = {l.out, in[0], 3, 3};
      } else {
        std::int64_t fan_in = 1;
        for (std::int64_t d : in) fan_in *= d;
        wshape = {l.out, fan_in};
      }
      if (net.weight_norm) {
        add(l.name + ".v", wshape);
        add(l.name + ".g", {l.out});
      } else {
        add(l.name + ".w", wshape);
      }
      add(l.name + ".b", {l.out});
    }
    in = shapes[i];
  }
  return layout;
}

ParamLayout param_layout(const ModelSpec& spec) { return param_layout(net_spec(spec)); }

namespace {

// Standard normal from a 64-bit engine by Box-Muller: the same numbers on
// every platform (std::normal_distribution is implementation-defined).
class Normal {
 public:
  explicit Normal(std::uint64_t seed) : m_rng(seed) {}
  double next() {
    if (m_has_spare) {
      m_has_spare = false;
      return m_spare;
    }
    const double u1 = 1.0 - uniform();  // (0, 1]: log is finite
    const double u2 = uniform();
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double t = 2.0 * std::numbers::pi * u2;
    m_spare = r * std::sin(t);
    m_has_spare = true;
    return r * std::cos(t);
  }

 private:
  double uniform() { return static_cast<double>(m_rng() >> 11) * 0x1.0p-53; }  // [0, 1)
  std::mt19937_64 m_rng;
  double m_spare = 0.0;
  bool m_has_spare = false;
};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

// He-normal weights (std sqrt(2 / fan_in)), drawn in layout order from one
// stream; g = ||v|| per output unit so the initial effective weight is v;
// zero biases.
void init_params(const ModelSpec& spec, const ParamLayout& layout, float* params,
                 std::uint64_t seed) {
  const ParamLayout expected = param_layout(spec);
  if (expected.count != layout.count || expected.views.size() != layout.views.size()) {
    throw InternalError("init_params: the layout (" + std::to_string(layout.count) +
                        " floats) is not the layout of model '" + spec.name + "' (" +
                        std::to_string(expected.count) + " floats)");
  }
  // The classifier (the last weight tensor) starts small: He scaling keeps
  // the activations' variance through the ReLU layers, but max-pooling grows
  // it, so He-scaled logits start around std 3 and the first steps see a
  // loss of 5-8 and jump. LeCun scale times 0.1 gives logits near 0 and an
  // initial loss near ln(classes), as with PyTorch's default init.
  std::string classifier;
  for (const ParamView& v : layout.views) {
    if (ends_with(v.name, ".v") || ends_with(v.name, ".w")) classifier = v.name;
  }
  Normal normal(seed);
  for (const ParamView& v : layout.views) {
    float* p = params + v.offset;
    if (ends_with(v.name, ".v") || ends_with(v.name, ".w")) {
      const double fan_in = static_cast<double>(v.count / static_cast<std::size_t>(v.shape[0]));
      const double std_dev =
          v.name == classifier ? 0.1 * std::sqrt(1.0 / fan_in) : std::sqrt(2.0 / fan_in);
      for (std::size_t i = 0; i < v.count; ++i) p[i] = static_cast<float>(std_dev * normal.next());
    } else if (ends_with(v.name, ".g")) {
      const ParamView& dir = layout.find(v.name.substr(0, v.name.size() - 2) + ".v");
      const std::size_t fan_in = dir.count / v.count;
      for (std::size_t o = 0; o < v.count; ++o) {
        double ss = 0.0;
        const float* vo = params + dir.offset + o * fan_in;
        for (std::size_t i = 0; i < fan_in; ++i) ss += static_cast<double>(vo[i]) * vo[i];
        p[o] = static_cast<float>(std::sqrt(ss));
      }
    } else {
      for (std::size_t i = 0; i < v.count; ++i) p[i] = 0.0f;
    }
  }
}

std::string model_summary(const ModelSpec& spec) {
  const NetSpec net = net_spec(spec);
  const ParamLayout layout = param_layout(net);
  const auto shapes = layer_output_shapes(net);
  auto shape_str = [](const std::vector<std::int64_t>& s) {
    std::string out;
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (i > 0) out += 'x';
      out += std::to_string(s[i]);
    }
    return out;
  };
  std::ostringstream os;
  os << "model " << spec.name << (net.weight_norm ? " (weight norm)" : "") << ", input "
     << shape_str({net.channels, net.height, net.width}) << ", " << spec.classes << " classes\n";
  for (std::size_t i = 0; i < net.layers.size(); ++i) {
    const LayerSpec& l = net.layers[i];
    std::string what;
    std::size_t count = 0;
    switch (l.kind) {
      case LayerKind::kConv3x3:
        what = "conv3x3 pad 1";
        break;
      case LayerKind::kMaxPool2x2:
        what = "maxpool 2x2";
        break;
      case LayerKind::kFc:
        what = "fc";
        break;
      case LayerKind::kRelu:
        what = "relu";
        break;
    }
    if (l.relu) what += " + relu";
    for (const ParamView& v : layout.views) {
      if (!l.name.empty() && v.name.rfind(l.name + ".", 0) == 0) count += v.count;
    }
    os << "  " << (l.name.empty() ? std::string("-") : l.name) << ": " << what << " -> "
       << shape_str(shapes[i]) << ", " << count << " params\n";
  }
  os << "  total: " << layout.count << " params (" << layout.views.size() << " tensors)";
  return os.str();
}

}  // namespace syncopt::nn
