// Weights out: a run's θ (params.f32) and θ̄ (params_ema.f32) as safetensors
// files that PyTorch loads (docs/models.md, "Weights out"). Tensors are
// named and shaped as the layer graph, in PyTorch's layout: <layer>.weight
// [out, in, kH, kW] for a convolution and [out, in] for a fully connected
// layer (weight normalisation folded: w = g v / ||v||), <layer>.bias, and
// for batch norm weight (γ), bias (β), running_mean, running_var and
// num_batches_tracked, the statistics computed for that parameter vector as
// the evaluation computes them (docs/bn.md). A '.' in a layer name becomes
// '_' (add7.proj -> add7_proj), as a PyTorch module name cannot hold one.
// The metadata carries the graph (syncopt.graph, JSON) and the input
// standardisation (syncopt.input_mean, syncopt.input_std), from which
// scripts/syncopt_torch.py builds the module.
#pragma once

#include <filesystem>
#include <vector>

namespace syncopt::train {

// Writes <out>/model.safetensors (θ) and <out>/model_ema.safetensors (θ̄)
// of the run directory `run` (out defaults to <run>/export), reading its
// config.toml, its parameter files and its training data (for the
// standardisation and the batch-norm statistics). Returns the files.
// MissingInputError (66) without params.f32 (a run that has not ended);
// DataError (65) for a parameter file of the wrong size; OutputError (73/74)
// when a file cannot be written.
std::vector<std::filesystem::path> export_safetensors(const std::filesystem::path& run,
                                                      const std::filesystem::path& out);

}  // namespace syncopt::train
