// A run's parameters as safetensors files in PyTorch's layout (see weights.hpp).
// safetensors: an 8-byte little-endian header length, a JSON header (each
// tensor's dtype, shape and [begin, end) byte offsets into the data; a
// "__metadata__" map of strings), padded with spaces to 8 bytes, the data.
#include "train/weights.hpp"

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "common/atomic_file.hpp"
#include "common/error.hpp"
#include "config/config.hpp"
#include "nn/cpu_network.hpp"
#include "nn/graph.hpp"
#include "nn/ops.hpp"
#include "train/evaluation.hpp"
#include "train/inputs.hpp"

namespace syncopt::train {
namespace {

namespace fs = std::filesystem;

struct Tensor {
  std::string name;
  std::vector<std::int64_t> shape;
  std::vector<float> f32;         // dtype F32, or
  std::vector<std::int64_t> i64;  // dtype I64 (num_batches_tracked)
};

std::string torch_name(std::string name) {
  std::replace(name.begin(), name.end(), '.', '_');
  return name;
}

std::vector<float> read_params(const fs::path& path, std::size_t count) {
  if (!fs::exists(path))
    throw MissingInputError(path.string() +
                            ": not found; a run writes it when it ends (or stops): export a run "
                            "that has ended, or resume this one to its end");
  const std::string bytes = read_file_bytes(path);
  if (bytes.size() != count * sizeof(float))
    throw DataError(path.string() + ": " + std::to_string(bytes.size()) + " bytes, expected " +
                    std::to_string(count * sizeof(float)) + " (" + std::to_string(count) +
                    " float32 parameters of the model config.toml describes)");
  std::vector<float> out(count);
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

// The graph as scripts/syncopt_torch.py builds it: nodes in order, inputs by
// index (-1: the images), the attributes each kind needs.
nlohmann::json graph_json(const nn::Graph& g) {
  nlohmann::json nodes = nlohmann::json::array();
  for (const nn::Node& n : g.nodes) {
    nlohmann::json j = {{"name", torch_name(n.name)},
                        {"type", std::string(nn::layer_type_name(n.type))},
                        {"inputs", n.inputs},
                        {"relu", n.relu},
                        {"in", n.in},
                        {"out", n.out}};
    switch (n.type) {
      case nn::LayerType::kConv:
      case nn::LayerType::kMaxPool:
      case nn::LayerType::kAvgPool:
        j["kernel"] = n.attr.kernel;
        j["stride"] = n.attr.stride;
        j["pad"] = n.attr.pad;
        j["bias"] = n.attr.bias;
        break;
      case nn::LayerType::kFc:
        j["fan_in"] = n.fan_in;
        j["bias"] = n.attr.bias;
        break;
      case nn::LayerType::kBatchNorm:
        j["eps"] = n.attr.eps;
        break;
      case nn::LayerType::kDropout:
        j["rate"] = n.attr.rate;
        break;
      default:
        break;
    }
    nodes.push_back(std::move(j));
  }
  return {{"name", g.name}, {"input", g.input}, {"classes", g.outputs}, {"nodes", nodes}};
}

// One parameter vector's tensors, node by node. `bn` holds the batch-norm
// statistics for these parameters (empty for a model without batch norm).
std::vector<Tensor> tensors_of(const nn::Graph& g, const std::vector<float>& p,
                               nn::cpu::CpuNetwork* bn) {
  std::vector<Tensor> out;
  const auto& views = g.layout.views;
  auto slice = [&](int view) {
    const auto& v = views[static_cast<std::size_t>(view)];
    return std::vector<float>(p.begin() + static_cast<std::ptrdiff_t>(v.offset),
                              p.begin() + static_cast<std::ptrdiff_t>(v.offset + v.count));
  };
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const nn::Node& n = g.nodes[i];
    const std::string name = torch_name(n.name);
    if (n.type == nn::LayerType::kConv || n.type == nn::LayerType::kFc) {
      std::vector<float> w = slice(n.weight);
      if (n.gain >= 0) {  // weight norm: w = g v / ||v||, as the backends compute it
        std::vector<float> folded(w.size()), norm(static_cast<std::size_t>(n.units));
        const std::vector<float> gain = slice(n.gain);
        nn::ops::weight_norm_forward(w.data(), gain.data(), n.units, n.fan_in, folded.data(),
                                     norm.data());
        w = std::move(folded);
      }
      std::vector<std::int64_t> shape = {n.units, n.fan_in};
      if (n.type == nn::LayerType::kConv) shape = {n.units, n.in[0], n.attr.kernel, n.attr.kernel};
      out.push_back({name + ".weight", shape, std::move(w), {}});
      if (n.bias >= 0) out.push_back({name + ".bias", {n.units}, slice(n.bias), {}});
    } else if (n.type == nn::LayerType::kBatchNorm) {
      std::vector<float> mean, var;
      bn->batch_norm_statistics(static_cast<int>(i), mean, var);
      const std::int64_t c = n.out[0];
      out.push_back({name + ".weight", {c}, slice(n.scale), {}});
      out.push_back({name + ".bias", {c}, slice(n.shift), {}});
      out.push_back({name + ".running_mean", {c}, std::move(mean), {}});
      out.push_back({name + ".running_var", {c}, std::move(var), {}});
      out.push_back({name + ".num_batches_tracked", {}, {}, {0}});
    }
  }
  return out;
}

std::string safetensors_bytes(const std::vector<Tensor>& tensors, const nlohmann::json& metadata) {
  nlohmann::ordered_json header;
  std::size_t offset = 0;
  for (const Tensor& t : tensors) {
    const std::size_t nbytes = t.i64.empty() ? t.f32.size() * 4 : t.i64.size() * 8;
    header[t.name] = {{"dtype", t.i64.empty() ? "F32" : "I64"},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  const std::uint64_t n = text.size();
  for (int b = 0; b < 8; ++b) out[b] = static_cast<char>((n >> (8 * b)) & 0xff);  // little-endian
  out += text;
  for (const Tensor& t : tensors) {  // x86 and every target here: little-endian already
    if (t.i64.empty())
      out.append(reinterpret_cast<const char*>(t.f32.data()), t.f32.size() * 4);
    else
      out.append(reinterpret_cast<const char*>(t.i64.data()), t.i64.size() * 8);
  }
  return out;
}

std::string floats_json(const std::vector<float>& v) { return nlohmann::json(v).dump(); }

}  // namespace

std::vector<fs::path> export_safetensors(const fs::path& run, const fs::path& out) {
  const fs::path cfg_path = run / "config.toml";
  if (!fs::exists(cfg_path))
    throw MissingInputError(cfg_path.string() +
                            ": not found; give a run directory, e.g. runs/<name>");
  const config::Config cfg = config::load(cfg_path.string(), {});
  const data::TrainTest data = data::load(load_options(cfg));
  const nn::Graph graph = nn::model_graph(model_spec(cfg, data.train));
  const std::vector<float> theta = read_params(run / "params.f32", graph.layout.count);
  const std::vector<float> ema = read_params(run / "params_ema.f32", graph.layout.count);

  // Batch norm: the statistics the evaluation computes for each vector.
  std::unique_ptr<nn::cpu::CpuNetwork> net;
  std::vector<float> bn_images;
  int bn_batch = static_cast<int>(cfg.train.batch),
      bn_batches = static_cast<int>(cfg.eval.bn_batches);
  if (graph.has_batch_norm) {
    bn_images = batch_norm_images(data.train, bn_batch, bn_batches, cfg.run.seed);
    net = std::make_unique<nn::cpu::CpuNetwork>(graph, bn_batch,
                                                static_cast<int>(cfg.compute.threads));
  }
  std::vector<float> input_std(data.train.inv_std.size());
  for (std::size_t c = 0; c < input_std.size(); ++c) input_std[c] = 1.0f / data.train.inv_std[c];
  const fs::path dir = out.empty() ? run / "export" : out;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec)
    throw OutputError(ExitCode::kCantCreate,
                      dir.string() + ": cannot create the folder (" + ec.message() + ")");
  std::vector<fs::path> files;
  for (const auto& [params, what, file] : {std::tuple{&theta, "theta", "model.safetensors"},
                                           std::tuple{&ema, "ema", "model_ema.safetensors"}}) {
    if (net) net->set_batch_norm_statistics(params->data(), bn_images.data(), bn_batch, bn_batches);
    const nlohmann::json metadata = {
        {"format", "pt"},
        {"syncopt.params", what},
        {"syncopt.run", fs::absolute(run).lexically_normal().string()},
        {"syncopt.weight_norm", "folded: weight = g v / ||v|| per output unit"},
        {"syncopt.input_mean", floats_json(data.train.mean)},
        {"syncopt.input_std", floats_json(input_std)},
        {"syncopt.graph", graph_json(graph).dump()}};
    const fs::path path = dir / file;
    write_file_atomic(path, safetensors_bytes(tensors_of(graph, *params, net.get()), metadata));
    files.push_back(path);
  }
  return files;
}

}  // namespace syncopt::train
