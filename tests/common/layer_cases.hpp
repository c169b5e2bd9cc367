// The one table of layer-kind test cases: small graphs of every layer kind
// (and of the ways kinds meet: fused ReLUs, tensors read twice, blocked
// layouts, residual adds), read by both the CPU backend's finite-difference
// gradient check (tests/unit/test_nn.cpp) and the CUDA-against-CPU check
// (tests/cuda/test_cuda_graph.cpp). A new layer kind adds its rows here.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/graph.hpp"

namespace syncopt::test {

namespace nn = syncopt::nn;

inline nn::LayerDesc layer(nn::LayerType type, const std::string& name = "") {
  nn::LayerDesc d;
  d.type = type;
  d.name = name;
  return d;
}

inline nn::LayerDesc conv(const std::string& name, std::int64_t out, std::int64_t k, std::int64_t s,
                          std::int64_t p, bool bias = true, bool wn = false) {
  nn::LayerDesc d = layer(nn::LayerType::kConv, name);
  d.out = out;
  d.kernel = k;
  d.stride = s;
  d.pad = p;
  d.bias = bias;
  d.weight_norm = wn;
  return d;
}

inline nn::LayerDesc fc(const std::string& name, std::int64_t out, bool bias = true,
                        bool wn = false) {
  nn::LayerDesc d = layer(nn::LayerType::kFc, name);
  d.out = out;
  d.bias = bias;
  d.weight_norm = wn;
  return d;
}

inline nn::LayerDesc pool(nn::LayerType type, std::int64_t k, std::int64_t s, std::int64_t p) {
  nn::LayerDesc d = layer(type);
  d.kernel = k;
  d.stride = s;
  d.pad = p;
  return d;
}

inline nn::LayerDesc add(const std::string& from, nn::Shortcut shortcut = nn::Shortcut::kIdentity) {
  nn::LayerDesc d = layer(nn::LayerType::kAdd);
  d.from = from;
  d.shortcut = shortcut;
  return d;
}

inline nn::LayerDesc dropout(double rate) {
  nn::LayerDesc d = layer(nn::LayerType::kDropout);
  d.rate = rate;
  return d;
}

// A graph of `layers` on a C x H x W input; its output is the "logits",
// whatever their count (classes = 0: unchecked).
inline nn::Graph graph_of(std::int64_t c, std::int64_t h, std::int64_t w,
                          std::vector<nn::LayerDesc> layers, std::int64_t classes = 0) {
  nn::GraphSpec s;
  s.name = "test";
  s.channels = c;
  s.height = h;
  s.width = w;
  s.classes = classes;
  s.layers = std::move(layers);
  return nn::build_graph(s);
}

struct LayerCase {
  std::string name;  // the section's name
  std::string kind;  // what the gradient check's table calls it
  nn::Graph graph;
  int batch = 2;
  std::uint64_t seed = 0;  // parameters, images and labels
  // The CUDA comparison keys dropout by the batch's hash (the finite
  // differences always use a fixed key: a perturbed input has another hash).
  bool hash_key = false;
};

inline std::vector<LayerCase> layer_cases() {
  using T = nn::LayerType;
  std::vector<LayerCase> c;
  auto row = [&](std::string name, std::string kind, nn::Graph g, int batch, std::uint64_t seed) {
    c.push_back({std::move(name), std::move(kind), std::move(g), batch, seed, false});
  };
  row("conv3x3 with weight norm and fused relu", "conv",
      graph_of(2, 5, 5, {conv("c", 3, 3, 1, 1, true, true), layer(T::kRelu)}), 2, 11);
  row("conv3x3 without weight norm, no relu, 8-channel blocked input", "conv",
      graph_of(8, 4, 4, {conv("c", 8, 3, 1, 1)}), 2, 12);
  row("conv3x3 weight norm, 1 channel (the first cnn layer)", "conv",
      graph_of(1, 6, 6, {conv("c", 4, 3, 1, 1, true, true)}), 2, 13);
  row("conv 5x5 stride 2 pad 2 without bias, 16 channels", "conv",
      graph_of(16, 7, 7, {conv("c", 16, 5, 2, 2, false)}), 2, 31);
  row("conv 1x1 stride 2 (a projection), weight norm", "conv",
      graph_of(4, 5, 5, {conv("c", 8, 1, 2, 0, false, true)}), 2, 32);
  row("conv 3x3 stride 2 pad 0 on an even image (a row and a column in no window)", "conv",
      graph_of(3, 6, 6, {conv("c", 4, 3, 2, 0)}), 3, 33);
  row("max-pool 2x2", "maxpool", graph_of(3, 4, 6, {pool(T::kMaxPool, 2, 2, 0)}), 2, 14);
  row("max-pool 2x2 on an odd image", "maxpool", graph_of(3, 5, 7, {pool(T::kMaxPool, 2, 2, 0)}), 3,
      24);
  row("max-pool 3x3 stride 2 pad 1 on 16 blocked channels", "maxpool",
      graph_of(16, 5, 5, {pool(T::kMaxPool, 3, 2, 1)}), 2, 33);
  row("average pooling 3x3 stride 2 pad 1 (padding counts)", "avgpool",
      graph_of(3, 5, 6, {pool(T::kAvgPool, 3, 2, 1)}), 2, 34);
  row("average pooling 2x2 on 16 channels", "avgpool",
      graph_of(16, 4, 4, {pool(T::kAvgPool, 2, 2, 0)}), 2, 35);
  row("average pooling 2x2 stride 3 (gaps between windows)", "avgpool",
      graph_of(2, 7, 7, {pool(T::kAvgPool, 2, 3, 0)}), 3, 36);
  row("global average pooling", "gap", graph_of(16, 3, 5, {layer(T::kGlobalAvgPool)}), 3, 36);
  row("batch norm on images", "bn", graph_of(16, 3, 3, {layer(T::kBatchNorm)}), 3, 37);
  row("batch norm with a fused relu, 3 channels", "bn",
      graph_of(3, 4, 3, {layer(T::kBatchNorm), layer(T::kRelu)}), 2, 38);
  row("batch norm with a fused relu on 16 blocked channels after a conv", "bn",
      graph_of(3, 4, 4, {conv("c", 16, 3, 1, 1, false), layer(T::kBatchNorm), layer(T::kRelu)}), 3,
      47);
  row("batch norm of an fc's vector output", "bn",
      graph_of(2, 3, 3, {fc("f", 6), layer(T::kBatchNorm)}), 4, 39);
  row("relu", "relu", graph_of(2, 3, 3, {layer(T::kRelu)}), 2, 15);
  row("relu on 16 blocked channels after a conv read twice (not fused)", "relu",
      graph_of(16, 3, 3, {conv("c", 16, 3, 1, 1), layer(T::kRelu, "r"), add("c")}), 2, 40);
  row("gelu", "gelu", graph_of(2, 3, 3, {layer(T::kGelu)}), 2, 51);
  row("gelu on 16 blocked channels after a conv, then an fc", "gelu",
      graph_of(3, 4, 4, {conv("c", 16, 3, 1, 1), layer(T::kGelu), fc("f", 5)}), 3, 52);
  row("gelu of a tensor read twice (its gradient is a sum)", "gelu",
      graph_of(8, 3, 3, {conv("c", 8, 3, 1, 1), layer(T::kGelu, "g"), add("c")}), 2, 53);
  row("fc with weight norm and fused relu", "fc",
      graph_of(3, 2, 2, {fc("f", 5, true, true), layer(T::kRelu)}), 3, 16);
  row("fc without weight norm", "fc", graph_of(1, 1, 7, {fc("f", 4)}), 3, 17);
  row("fc without bias, on a blocked image", "fc",
      graph_of(16, 2, 2, {conv("c", 16, 1, 1, 0), fc("f", 3, false)}), 2, 41);
  row("dropout (a fixed key)", "dropout", graph_of(2, 3, 4, {dropout(0.3)}), 3, 42);
  row("dropout after a conv, keyed by the batch's hash", "dropout",
      graph_of(16, 3, 3, {conv("c", 16, 3, 1, 1), dropout(0.5), fc("f", 4)}), 3, 44);
  c.back().hash_key = true;
  row("flatten then dropout then fc (the flatten stays a layer)", "flatten",
      graph_of(16, 3, 3, {conv("c", 16, 3, 1, 1), layer(T::kFlatten), dropout(0.25), fc("f", 4)}),
      2, 43);
  row("residual add, identity shortcut, fused relu", "add",
      graph_of(8, 4, 4,
               {conv("c1", 8, 3, 1, 1), layer(T::kRelu, "r1"), conv("c2", 8, 3, 1, 1), add("r1"),
                layer(T::kRelu)}),
      2, 44);
  row("residual add of the input itself", "add",
      graph_of(3, 3, 3, {conv("c1", 3, 3, 1, 1), add("input")}), 2, 45);
  row("conv - relu - pool - conv - pool - fc chain on blocked layouts", "chain",
      graph_of(3, 8, 8,
               {conv("c1", 8, 3, 1, 1), layer(T::kRelu), pool(T::kMaxPool, 2, 2, 0),
                conv("c2", 16, 3, 1, 1), layer(T::kRelu), pool(T::kMaxPool, 2, 2, 0), fc("f", 5)}),
      2, 18);
  return c;
}

}  // namespace syncopt::test
