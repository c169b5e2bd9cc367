// A model spec's layout, initialisation and summary, through its graph
// (nn/graph.cpp).
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
