// libFuzzer target: the config loader with layer graphs. The input is a TOML
// file: parsed and validated as `syncopt train` does (config::parse), then,
// when it is a valid config, its model's graph is built, laid out and sized
// (nn::model_graph, nn::footprint) as a trainer would before allocating.
// Any syncopt::Error is an answer (a clear message with a documented exit
// code); anything else escaping, a crash or a sanitizer report is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "common/error.hpp"
#include "config/config.hpp"
#include "nn/footprint.hpp"
#include "nn/graph.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const syncopt::config::Config cfg = syncopt::config::parse(text, "fuzz.toml", {});
    syncopt::nn::ModelSpec spec;
    spec.model = cfg.model.name;
    spec.weight_norm = cfg.model.weight_norm;
    spec.mlp_hidden = static_cast<int>(cfg.model.mlp_hidden);
    spec.layers = cfg.model.layers;
    const syncopt::nn::Graph graph = syncopt::nn::model_graph(spec);
    (void)syncopt::nn::footprint(graph, cfg.train.batch, 6);
    (void)syncopt::nn::graph_summary(graph);
    (void)syncopt::config::to_toml(cfg);
  } catch (const syncopt::Error&) {
  }
  return 0;
}
