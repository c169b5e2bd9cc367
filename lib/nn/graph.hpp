// A model as a layer graph, derived once from its description and shared by
// every user of a model: both backends run its nodes, the parameter servers
// and the pipelined exchange cut the flat parameter buffer by its groups, the
// simulator and the planner size messages by its parameter count, and
// --dry-run prints it.
//
// A description (GraphSpec) is an input shape and a list of layers, as the
// config's [[model.layers]] or a built-in model writes it; each layer takes
// the previous layer's output (an add also takes a named earlier one).
// build_graph() infers every shape, checks that each layer fits its input
// (one ConfigError naming the layer and both shapes otherwise), inserts the
// projection of a residual add that asks for one, fuses each ReLU into the
// layer before it where that layer's output has no other use, drops a
// flatten whose only consumers are fully connected layers (they read an
// image input in NCHW order anyway), and lays out the parameters.
//
// Shapes never include the batch: {C, H, W} for images, {units} for vectors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "nn/layer.hpp"
#include "nn/model.hpp"

namespace syncopt::nn {

struct GraphSpec {
  std::string name;  // for messages and the summary ("cnn", "custom")
  std::int64_t channels = 1, height = 28, width = 28;
  std::int64_t classes = 10;  // the logits the last layer must give per example
  std::vector<LayerDesc> layers;
};

struct Node {
  LayerType type = LayerType::kFc;
  std::string name;
  int layer = -1;           // position in GraphSpec::layers (from 0); -1: inserted by the graph
  std::vector<int> inputs;  // node ids, earlier in the list; kGraphInput = the images
  std::vector<std::int64_t> in, out;  // the shape of inputs[0] and of the output
  LayerDesc attr;                     // kernel, stride, out resolved; weight_norm, eps, ...
  bool relu = false;                  // a ReLU fused on the output
  // Parameter views (indices into Graph::layout.views), -1 when absent.
  int weight = -1, gain = -1, bias = -1, scale = -1, shift = -1;
  std::int64_t units = 0, fan_in = 0;             // conv, fc: the weight matrix [units, fan_in]
  std::int64_t flops = 0;                         // forward, per example (a multiply-add is 2)
  std::size_t param_offset = 0, param_count = 0;  // the node's slice of the flat buffer
};

inline constexpr int kGraphInput = -1;

// A node's parameters as one contiguous slice of the flat buffer, in network
// (forward) order; the backward pass produces them in reverse.
struct ParamGroup {
  std::string name;  // the node's
  int node = 0;
  std::size_t offset = 0, count = 0;  // in floats
};

struct Graph {
  std::string name;
  std::vector<std::int64_t> input;  // C, H, W
  std::vector<Node> nodes;          // in execution order
  ParamLayout layout;
  std::vector<ParamGroup> groups;  // the nodes with parameters, in order; they tile the layout
  std::int64_t outputs = 0;        // per example, of the last node: the logits
  std::int64_t flops = 0;          // forward, per example
  bool has_batch_norm = false, has_dropout = false;
  std::vector<int> consumers_count;  // per node: how many node inputs read it
};

// Infers, checks and lays out a description (see the top of this file).
// Throws ConfigError naming the layer (position and name) and the shapes
// that do not fit, an unknown or repeated name, or a bad attribute.
Graph build_graph(const GraphSpec& spec);

// The description of a model: a built-in (cnn, mlp, logreg, resnet20,
// resnet18) or spec.layers for "custom". ConfigError for an unknown name.
GraphSpec model_description(const ModelSpec& spec);

// build_graph(model_description(spec)).
Graph model_graph(const ModelSpec& spec);

// Seeded initialisation in layout order from one stream (the same numbers
// on every rank and backend): weights and directions He-normal (std
// sqrt(2 / fan_in)), except the last one, the classifier, at 0.1 x LeCun
// scale so the first logits are near 0; g = ||v|| per unit; biases and
// shifts 0; scales 1.
void init_params(const Graph& graph, float* params, std::uint64_t seed);

// Per parameter group (Graph::groups, forward order): its share of the
// forward FLOPs, the parameter-free nodes after it up to the next group
// counted with it (and those before the first group with the first); equal
// shares when the graph has no FLOPs. Sums to 1. Empty without groups. The
// simulator spreads a step's compute over the layers by it, and a
// straggler's worker its slowdown (docs/design.md §7).
std::vector<double> group_flops_shares(const Graph& graph);

// One line per node: name, what it does, output shape, parameters, forward
// FLOPs per example; then the totals (for --dry-run and the logs).
std::string graph_summary(const Graph& graph);

// "16x28x28", "256".
std::string shape_string(const std::vector<std::int64_t>& shape);

}  // namespace syncopt::nn
