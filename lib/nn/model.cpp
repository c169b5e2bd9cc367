// A model spec's layout, initialisation and summary (through its graph,
// nn/graph.cpp), and the straight-line NetSpec form for the CUDA backend:
// the adapter from the graph and the NetSpec's own shapes and layout, which
// equal the graph's for the models it can describe.
//
// NetSpec layout order: layers in network order; per conv / fc layer
// "<name>.v", "<name>.g", "<name>.b" with weight norm, "<name>.w", "<name>.b"
// without. Conv weights OIHW [out, in, 3, 3]; fc weights [out, in] with `in`
// in NCHW-flatten order.
#include "nn/model.hpp"

#include <cstdint>
#include <string>

#include "common/error.hpp"
#include "nn/graph.hpp"

namespace syncopt::nn {

const ParamView& ParamLayout::find(const std::string& name) const {
  for (const ParamView& v : views) {
    if (v.name == name) return v;
  }
  throw InternalError("parameter view '" + name + "' does not exist in this model's layout");
}

NetSpec net_spec(const ModelSpec& spec) {
  const Graph graph = model_graph(spec);
  auto unsupported = [&](const Node& n, const std::string& why) {
    return ConfigError("model '" + spec.name() +
                       "' is not yet supported by the CUDA backend, which runs straight lines of "
                       "3x3 / stride 1 / pad 1 convolutions with bias, 2x2 max-pooling, fully "
                       "connected layers with bias and ReLUs, weight norm on all or none of them: "
                       "its node \"" +
                       n.name + "\" (" + std::string(layer_type_name(n.type)) + ") " + why +
                       "; use compute.backend = \"cpu\"");
  };
  NetSpec net;
  net.channels = static_cast<int>(graph.input[0]);
  net.height = static_cast<int>(graph.input[1]);
  net.width = static_cast<int>(graph.input[2]);
  bool first_weighted = true;
  int prev = kGraphInput;
  for (std::size_t i = 0; i < graph.nodes.size(); ++i) {
    const Node& n = graph.nodes[i];
    if (n.inputs.size() != 1 || n.inputs[0] != prev) {
      throw unsupported(n, "is not in a straight line");
    }
    prev = static_cast<int>(i);
    const LayerDesc& a = n.attr;
    switch (n.type) {
      case LayerType::kConv:
      case LayerType::kFc:
        if (n.type == LayerType::kConv && (a.kernel != 3 || a.stride != 1 || a.pad != 1)) {
          throw unsupported(n, "is not 3x3 / stride 1 / pad 1");
        }
        if (!a.bias) throw unsupported(n, "has no bias");
        if (first_weighted) net.weight_norm = a.weight_norm;
        if (a.weight_norm != net.weight_norm) throw unsupported(n, "mixes weight norm settings");
        first_weighted = false;
        net.layers.push_back({n.type == LayerType::kConv ? LayerKind::kConv3x3 : LayerKind::kFc,
                              n.name, static_cast<int>(n.units), n.relu});
        break;
      case LayerType::kMaxPool:
        if (a.kernel != 2 || a.stride != 2 || a.pad != 0) throw unsupported(n, "is not 2x2 / 2");
        net.layers.push_back({LayerKind::kMaxPool2x2, "", 0, false});
        break;
      case LayerType::kRelu:
        net.layers.push_back({LayerKind::kRelu, "", 0, false});
        break;
      default:
        throw unsupported(n, "has no CUDA implementation yet");
    }
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
  auto add = [&](const std::string& name, std::vector<std::int64_t> shape, ParamRole role) {
    ParamView v;
    v.name = name;
    v.role = role;
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
        add(l.name + ".v", wshape, ParamRole::kDirection);
        add(l.name + ".g", {l.out}, ParamRole::kGain);
      } else {
        add(l.name + ".w", wshape, ParamRole::kWeight);
      }
      add(l.name + ".b", {l.out}, ParamRole::kBias);
    }
    in = shapes[i];
  }
  return layout;
}

ParamLayout param_layout(const ModelSpec& spec) { return model_graph(spec).layout; }

void init_params(const ModelSpec& spec, const ParamLayout& layout, float* params,
                 std::uint64_t seed) {
  const Graph graph = model_graph(spec);
  if (graph.layout.count != layout.count || graph.layout.views.size() != layout.views.size()) {
    throw InternalError("init_params: the layout (" + std::to_string(layout.count) +
                        " floats) is not the layout of model '" + spec.name() + "' (" +
                        std::to_string(graph.layout.count) + " floats)");
  }
  init_params(graph, params, seed);
}

std::string model_summary(const ModelSpec& spec) { return graph_summary(model_graph(spec)); }

}  // namespace syncopt::nn
