// model.layers: a model described in the config as a TOML array of tables,
// one table per layer (docs/models.md):
//
//   [[model.layers]]
//   type = "conv"
//   out = 16
//   kernel = 3
//   pad = 1
//   bias = false
//
// or inline, `layers = [{ type = "conv", out = 16, ... }, { type = "bn" }]`.
// This file reads such an array into nn::LayerDesc values (every problem of
// every layer at once, each with its position and line) and writes them back
// as TOML. The graph's own checks (shapes) come later, with the input shape.
#pragma once

#include <toml++/toml.h>

#include <optional>
#include <string>
#include <vector>

#include "nn/layer.hpp"

namespace syncopt::config {

// Reads `node` (model.layers) into `out`; returns what is wrong instead
// ("layer 3 (line 27, \"c2\"): unknown type \"bachnorm\"; did you mean
// \"bn\"?", one problem per line) when something is.
std::optional<std::string> read_layers(const toml::node& node, std::vector<nn::LayerDesc>& out);

// The layers as a TOML value (an array of inline tables, one per line) that
// read_layers reads back equal; "[]" when empty.
std::string layers_toml(const std::vector<nn::LayerDesc>& layers);

// The layer attributes, per type ("conv (out, kernel, ...); bn (eps); ..."):
// the table the reader checks attributes against, which the model.layers key
// description must cover (a unit test holds it to that).
std::string layers_reference();

}  // namespace syncopt::config
