// The layer graph (see graph.hpp): shape inference and checks, the graph's
// own rewrites (projection shortcuts, fused ReLUs, flattens into fc), the
// parameter layout, the built-in models as descriptions, initialisation and
// the printed summary.
//
// Parameter layout (fixed; checkpoints and the wire format depend on it):
// nodes in execution order; per conv / fc "<name>.v", "<name>.g" with weight
// norm or "<name>.w" without, then "<name>.b" if it has a bias; per batch
// norm "<name>.gamma", "<name>.beta". Conv weights OIHW [out, in, k, k]; fc
// weights [out, in] with `in` in NCHW-flatten order. For cnn, mlp and logreg
// this is the layout they had as straight layer lists, value for value.
#include "nn/graph.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <numbers>
#include <random>
#include <set>
#include <sstream>

#include "common/error.hpp"
#include "common/suggest.hpp"

namespace syncopt::nn {

namespace {

std::int64_t numel(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (const std::int64_t d : shape) n *= d;
  return n;
}

// "; did you mean \"x\"?" for the closest candidate within a few edits, else "".
std::string did_you_mean(std::string_view word, const std::vector<std::string>& candidates) {
  const std::string_view best = closest(word, candidates);
  return best.empty() ? "" : "; did you mean \"" + std::string(best) + "\"?";
}

// The output size of a window of `k`, stride `s`, pad `p` over `n`: 0 when
// the window does not fit.
std::int64_t window_out(std::int64_t n, std::int64_t k, std::int64_t s, std::int64_t p) {
  return n + 2 * p < k ? 0 : (n + 2 * p - k) / s + 1;
}

class Builder {
 public:
  explicit Builder(const GraphSpec& spec) : m_spec(spec) {}

  Graph build() {
    m_graph.name = m_spec.name;
    m_graph.input = {m_spec.channels, m_spec.height, m_spec.width};
    if (m_spec.channels < 1 || m_spec.height < 1 || m_spec.width < 1) {
      throw ConfigError("model '" + m_spec.name + "': the input must be at least 1x1x1, got " +
                        shape_string(m_graph.input));
    }
    if (m_spec.layers.empty()) {
      throw ConfigError("model '" + m_spec.name +
                        "' has no layers; list them as [[model.layers]] tables (docs/models.md)");
    }
    int cur = kGraphInput;
    for (std::size_t i = 0; i < m_spec.layers.size(); ++i)
      cur = add_layer(static_cast<int>(i), cur);
    drop_flattens();
    fuse_relus();
    compact();
    lay_out();
    check_outputs();
    return std::move(m_graph);
  }

 private:
  const std::vector<std::int64_t>& shape_of(int id) const {
    return id == kGraphInput ? m_graph.input : m_graph.nodes[static_cast<std::size_t>(id)].out;
  }

  std::string where(int i, const std::string& name) const {
    return "model '" + m_spec.name + "', layer " + std::to_string(i + 1) + " (\"" + name + "\", " +
           std::string(layer_type_name(m_spec.layers[static_cast<std::size_t>(i)].type)) + ")";
  }

  int push(Node n) {
    m_graph.nodes.push_back(std::move(n));
    return static_cast<int>(m_graph.nodes.size()) - 1;
  }

  void need_image(const std::string& at, const std::vector<std::int64_t>& in,
                  const char* what) const {
    if (in.size() != 3) {
      throw ConfigError(at + ": " + what + " needs an image input (C x H x W), but its input is " +
                        shape_string(in) +
                        " (a vector, after an fc or flatten layer); move it before them");
    }
  }

  int add_layer(int i, int cur) {
    const LayerDesc& desc = m_spec.layers[static_cast<std::size_t>(i)];
    const std::string name = desc.name.empty()
                                 ? std::string(layer_type_name(desc.type)) + std::to_string(i + 1)
                                 : desc.name;
    const std::string at = where(i, name);
    if (name == "input") throw ConfigError(at + ": the name \"input\" is reserved (the images)");
    if (m_names.count(name) != 0) {
      throw ConfigError(at + ": the name \"" + name + "\" is already used by layer " +
                        std::to_string(m_names[name].first + 1) + "; names must be unique");
    }
    Node n;
    n.type = desc.type;
    n.name = name;
    n.layer = i;
    n.inputs = {cur};
    n.in = shape_of(cur);
    n.attr = desc;
    const std::vector<std::int64_t>& in = n.in;
    switch (desc.type) {
      case LayerType::kConv:
        shape_conv(n, at);
        break;
      case LayerType::kFc:
        shape_fc(n, at);
        break;
      case LayerType::kBatchNorm:
        if (!(desc.eps > 0.0)) throw ConfigError(at + ": eps must be > 0");
        n.out = in;
        n.flops = 2 * numel(in);
        break;
      case LayerType::kRelu:
        n.out = in;
        n.flops = numel(in);
        break;
      case LayerType::kGelu:  // erf and a few multiply-adds per element
        n.out = in;
        n.flops = 8 * numel(in);
        break;
      case LayerType::kDropout:
        if (!(desc.rate >= 0.0 && desc.rate < 1.0)) {
          throw ConfigError(at + ": rate must be in [0, 1), got " + std::to_string(desc.rate));
        }
        n.out = in;
        n.flops = numel(in);
        break;
      case LayerType::kFlatten:
        n.out = {numel(in)};
        break;
      case LayerType::kMaxPool:
      case LayerType::kAvgPool:
        shape_pool(n, at);
        break;
      case LayerType::kGlobalAvgPool:
        need_image(at, in, "global average pooling");
        n.out = {in[0], 1, 1};
        n.flops = numel(in);
        break;
      case LayerType::kAdd:
        return add_residual(i, at, std::move(n));
    }
    const int id = push(std::move(n));
    m_names[name] = {i, id};
    return id;
  }

  void shape_conv(Node& n, const std::string& at) const {
    const LayerDesc& desc = n.attr;
    const std::vector<std::int64_t>& in = n.in;
    need_image(at, in, "a convolution");
    resolve_window(n, at, 3, 1);
    if (desc.out < 1) throw ConfigError(at + ": out (output channels) must be >= 1");
    const std::int64_t ho = window_out(in[1], n.attr.kernel, n.attr.stride, n.attr.pad);
    const std::int64_t wo = window_out(in[2], n.attr.kernel, n.attr.stride, n.attr.pad);
    if (ho < 1 || wo < 1) window_error(at, n, "convolution");
    n.out = {desc.out, ho, wo};
    n.units = desc.out;
    n.fan_in = in[0] * n.attr.kernel * n.attr.kernel;
    n.flops = 2 * n.units * n.fan_in * ho * wo + (desc.bias ? n.units * ho * wo : 0);
  }

  void shape_fc(Node& n, const std::string& at) const {
    std::int64_t units = n.attr.out;
    if (units == 0) {
      if (m_spec.classes < 1) {
        throw ConfigError(at + ": out (units) must be set; 0 means the class count, unknown here");
      }
      units = m_spec.classes;
    }
    if (units < 0) throw ConfigError(at + ": out (units) must be >= 1 (0 = the class count)");
    n.attr.out = units;
    n.units = units;
    n.fan_in = numel(n.in);
    n.out = {units};
    n.flops = 2 * units * n.fan_in + (n.attr.bias ? units : 0);
  }

  void shape_pool(Node& n, const std::string& at) const {
    const std::vector<std::int64_t>& in = n.in;
    const char* what = n.type == LayerType::kMaxPool ? "max-pooling" : "average pooling";
    need_image(at, in, what);
    resolve_window(n, at, 2, 0);
    if (2 * n.attr.pad > n.attr.kernel) {
      throw ConfigError(at + ": pad " + std::to_string(n.attr.pad) +
                        " is more than half the kernel " + std::to_string(n.attr.kernel) +
                        " (a window of padding alone); lower pad");
    }
    const std::int64_t ho = window_out(in[1], n.attr.kernel, n.attr.stride, n.attr.pad);
    const std::int64_t wo = window_out(in[2], n.attr.kernel, n.attr.stride, n.attr.pad);
    if (ho < 1 || wo < 1) window_error(at, n, what);
    n.out = {in[0], ho, wo};
    n.flops = in[0] * ho * wo * n.attr.kernel * n.attr.kernel;
  }

  void resolve_window(Node& n, const std::string& at, std::int64_t default_kernel,
                      std::int64_t default_stride) const {
    LayerDesc& a = n.attr;
    if (a.kernel == 0) a.kernel = default_kernel;
    if (a.stride == 0) a.stride = default_stride == 0 ? a.kernel : default_stride;
    if (a.kernel < 1) throw ConfigError(at + ": kernel must be >= 1");
    if (a.stride < 1) throw ConfigError(at + ": stride must be >= 1");
    if (a.pad < 0) throw ConfigError(at + ": pad must be >= 0");
  }

  [[noreturn]] void window_error(const std::string& at, const Node& n, const char* what) const {
    throw ConfigError(at + ": a " + what + " window of " + std::to_string(n.attr.kernel) + "x" +
                      std::to_string(n.attr.kernel) + " with pad " + std::to_string(n.attr.pad) +
                      " does not fit its input " + shape_string(n.in) +
                      "; lower the kernel, raise pad, or remove a downsampling layer before it");
  }

  // The previous output plus the output of `from`; a projection (1x1 conv,
  // no bias, then batch norm) on the `from` side when asked for and the
  // shapes differ, its stride the one that maps the `from` image onto ours.
  int add_residual(int i, const std::string& at, Node n) {
    const LayerDesc& desc = n.attr;
    int other = kGraphInput;
    if (desc.from.empty()) {
      throw ConfigError(at + ": an add needs from = \"<name of an earlier layer>\" (or \"input\")");
    }
    if (desc.from != "input") {
      const auto it = m_names.find(desc.from);
      if (it == m_names.end()) {
        std::vector<std::string> earlier;
        for (const auto& [nm, pos] : m_names) earlier.push_back(nm);
        bool later = false;
        for (std::size_t j = static_cast<std::size_t>(i) + 1; j < m_spec.layers.size(); ++j) {
          later = later || m_spec.layers[j].name == desc.from;
        }
        throw ConfigError(at + ": from = \"" + desc.from + "\" " +
                          (later ? "names a later layer; an add reads an earlier one"
                                 : "is no earlier layer" + did_you_mean(desc.from, earlier)));
      }
      other = it->second.second;
    }
    const std::vector<std::int64_t>& main = n.in;
    const std::vector<std::int64_t> side = shape_of(other);
    if (main != side) {
      if (desc.shortcut != Shortcut::kProjection || main.size() != 3 || side.size() != 3) {
        throw ConfigError(
            at + ": the previous layer gives " + shape_string(main) + " but \"" + desc.from +
            "\" gives " + shape_string(side) +
            (desc.shortcut == Shortcut::kProjection
                 ? "; a projection needs two images"
                 : "; they must agree for an identity shortcut: set shortcut = \"projection\" "
                   "(a 1x1 convolution and batch norm on the shortcut)"));
      }
      std::int64_t stride = 0;
      for (std::int64_t s = 1; s <= std::max(side[1], side[2]); ++s) {
        if (window_out(side[1], 1, s, 0) == main[1] && window_out(side[2], 1, s, 0) == main[2]) {
          stride = s;
          break;
        }
      }
      if (stride == 0) {
        throw ConfigError(at + ": no stride of a 1x1 projection maps \"" + desc.from + "\"'s " +
                          shape_string(side) + " onto the previous layer's " + shape_string(main) +
                          "; the shortcut's image must be the same size or a stride multiple");
      }
      Node proj;
      proj.type = LayerType::kConv;
      proj.name = n.name + ".proj";
      proj.inputs = {other};
      proj.in = side;
      proj.attr.type = LayerType::kConv;
      proj.attr.out = main[0];
      proj.attr.kernel = 1;
      proj.attr.stride = stride;
      proj.attr.bias = false;
      proj.out = main;
      proj.units = main[0];
      proj.fan_in = side[0];
      proj.flops = 2 * proj.units * proj.fan_in * main[1] * main[2];
      const int proj_id = push(std::move(proj));
      Node bn;
      bn.type = LayerType::kBatchNorm;
      bn.name = n.name + ".proj_bn";
      bn.inputs = {proj_id};
      bn.in = main;
      bn.out = main;
      bn.attr.type = LayerType::kBatchNorm;
      bn.flops = 2 * numel(main);
      other = push(std::move(bn));
    }
    n.inputs.push_back(other);
    n.out = main;
    n.flops = numel(main);
    const std::string name = n.name;
    const int id = push(std::move(n));
    m_names[name] = {i, id};
    return id;
  }

  std::vector<std::vector<int>> consumers() const {
    std::vector<std::vector<int>> out(m_graph.nodes.size());
    for (std::size_t j = 0; j < m_graph.nodes.size(); ++j) {
      if (m_dead.count(static_cast<int>(j)) != 0) continue;
      for (const int in : m_graph.nodes[j].inputs) {
        if (in != kGraphInput) out[static_cast<std::size_t>(in)].push_back(static_cast<int>(j));
      }
    }
    return out;
  }

  // Node `from`'s readers read `to` instead; `from` is gone.
  void bypass(int from, int to) {
    for (Node& n : m_graph.nodes) {
      for (int& in : n.inputs) {
        if (in == from) in = to;
      }
      n.in = shape_of(n.inputs[0]);  // an fc that read a flatten reads its image now
    }
    m_dead.insert(from);
  }

  // A flatten read only by fc layers is their own NCHW flattening; one of
  // a vector is nothing.
  void drop_flattens() {
    for (std::size_t j = 0; j < m_graph.nodes.size(); ++j) {
      const Node& n = m_graph.nodes[j];
      if (n.type != LayerType::kFlatten) continue;
      const auto readers = consumers()[j];
      const bool only_fc =
          !readers.empty() && std::all_of(readers.begin(), readers.end(), [&](int r) {
            return m_graph.nodes[static_cast<std::size_t>(r)].type == LayerType::kFc;
          });
      const bool is_last = j + 1 == m_graph.nodes.size();
      if ((only_fc || n.in.size() == 1) && !is_last) bypass(static_cast<int>(j), n.inputs[0]);
    }
  }

  // A ReLU whose input is a conv, fc, batch norm or add read by nothing else
  // becomes that node's output activation (a post-op, no tensor of its own).
  void fuse_relus() {
    for (std::size_t j = 0; j < m_graph.nodes.size(); ++j) {
      const Node& r = m_graph.nodes[j];
      if (r.type != LayerType::kRelu || m_dead.count(static_cast<int>(j)) != 0) continue;
      const int p = r.inputs[0];
      if (p == kGraphInput) continue;
      Node& producer = m_graph.nodes[static_cast<std::size_t>(p)];
      const bool fusable = producer.type == LayerType::kConv || producer.type == LayerType::kFc ||
                           producer.type == LayerType::kBatchNorm ||
                           producer.type == LayerType::kAdd;
      if (!fusable || producer.relu || consumers()[static_cast<std::size_t>(p)].size() != 1) {
        continue;
      }
      producer.relu = true;
      producer.flops += r.flops;
      bypass(static_cast<int>(j), p);
    }
  }

  void compact() {
    std::vector<int> new_id(m_graph.nodes.size(), -2);
    std::vector<Node> kept;
    for (std::size_t j = 0; j < m_graph.nodes.size(); ++j) {
      if (m_dead.count(static_cast<int>(j)) != 0) continue;
      new_id[j] = static_cast<int>(kept.size());
      kept.push_back(std::move(m_graph.nodes[j]));
    }
    for (Node& n : kept) {
      for (int& in : n.inputs) {
        if (in != kGraphInput) in = new_id[static_cast<std::size_t>(in)];
      }
    }
    m_graph.nodes = std::move(kept);
    m_dead.clear();
    m_graph.consumers_count.assign(m_graph.nodes.size(), 0);
    for (const Node& n : m_graph.nodes) {
      for (const int in : n.inputs) {
        if (in != kGraphInput) ++m_graph.consumers_count[static_cast<std::size_t>(in)];
      }
    }
  }

  void lay_out() {
    ParamLayout& layout = m_graph.layout;
    auto add = [&](const std::string& name, std::vector<std::int64_t> shape, ParamRole role) {
      ParamView v;
      v.name = name;
      v.offset = layout.count;
      v.count = static_cast<std::size_t>(numel(shape));
      v.shape = std::move(shape);
      v.role = role;
      layout.count += v.count;
      layout.views.push_back(std::move(v));
      return static_cast<int>(layout.views.size()) - 1;
    };
    for (std::size_t j = 0; j < m_graph.nodes.size(); ++j) {
      Node& n = m_graph.nodes[j];
      n.param_offset = layout.count;
      if (n.type == LayerType::kConv || n.type == LayerType::kFc) {
        const std::vector<std::int64_t> wshape =
            n.type == LayerType::kConv
                ? std::vector<std::int64_t>{n.units, n.in[0], n.attr.kernel, n.attr.kernel}
                : std::vector<std::int64_t>{n.units, n.fan_in};
        if (n.attr.weight_norm) {
          n.weight = add(n.name + ".v", wshape, ParamRole::kDirection);
          n.gain = add(n.name + ".g", {n.units}, ParamRole::kGain);
        } else {
          n.weight = add(n.name + ".w", wshape, ParamRole::kWeight);
        }
        if (n.attr.bias) n.bias = add(n.name + ".b", {n.units}, ParamRole::kBias);
      } else if (n.type == LayerType::kBatchNorm) {
        n.scale = add(n.name + ".gamma", {n.out[0]}, ParamRole::kScale);
        n.shift = add(n.name + ".beta", {n.out[0]}, ParamRole::kShift);
        m_graph.has_batch_norm = true;
      }
      m_graph.has_dropout = m_graph.has_dropout || n.type == LayerType::kDropout;
      n.param_count = layout.count - n.param_offset;
      if (n.param_count > 0) {
        m_graph.groups.push_back({n.name, static_cast<int>(j), n.param_offset, n.param_count});
      }
      m_graph.flops += n.flops;
    }
    m_graph.outputs = numel(m_graph.nodes.back().out);
  }

  void check_outputs() const {
    if (m_spec.classes > 0 && m_graph.outputs != m_spec.classes) {
      const Node& last = m_graph.nodes.back();
      throw ConfigError("model '" + m_spec.name + "': the last layer (\"" + last.name +
                        "\") gives " + shape_string(last.out) + " = " +
                        std::to_string(m_graph.outputs) +
                        " outputs per example, but the data has " + std::to_string(m_spec.classes) +
                        " classes; end the model with { type = \"fc\" } (its out defaults to "
                        "the class count)");
    }
  }

  const GraphSpec& m_spec;
  Graph m_graph;
  std::map<std::string, std::pair<int, int>> m_names;  // layer name -> (layer, node id)
  std::set<int> m_dead;
};

LayerDesc conv(const std::string& name, std::int64_t out, std::int64_t kernel, std::int64_t stride,
               std::int64_t pad, bool bias, bool weight_norm) {
  LayerDesc d;
  d.type = LayerType::kConv;
  d.name = name;
  d.out = out;
  d.kernel = kernel;
  d.stride = stride;
  d.pad = pad;
  d.bias = bias;
  d.weight_norm = weight_norm;
  return d;
}

LayerDesc fc(const std::string& name, std::int64_t out, bool weight_norm) {
  LayerDesc d;
  d.type = LayerType::kFc;
  d.name = name;
  d.out = out;
  d.weight_norm = weight_norm;
  return d;
}

LayerDesc simple(LayerType type, const std::string& name = "") {
  LayerDesc d;
  d.type = type;
  d.name = name;
  return d;
}

LayerDesc maxpool2() {
  LayerDesc d = simple(LayerType::kMaxPool);
  d.kernel = 2;
  d.stride = 2;
  return d;
}

// He et al. 2016's basic block: conv3x3-bn-relu-conv3x3-bn, + shortcut, relu.
// The shortcut is a projection where the shape changes (their option B).
void basic_block(std::vector<LayerDesc>& l, const std::string& prefix, const std::string& input,
                 std::int64_t width, std::int64_t stride) {
  l.push_back(conv(prefix + ".conv1", width, 3, stride, 1, false, false));
  l.push_back(simple(LayerType::kBatchNorm, prefix + ".bn1"));
  l.push_back(simple(LayerType::kRelu, prefix + ".relu1"));
  l.push_back(conv(prefix + ".conv2", width, 3, 1, 1, false, false));
  l.push_back(simple(LayerType::kBatchNorm, prefix + ".bn2"));
  LayerDesc add = simple(LayerType::kAdd, prefix + ".add");
  add.from = input;
  add.shortcut = Shortcut::kProjection;
  l.push_back(add);
  l.push_back(simple(LayerType::kRelu, prefix + ".out"));
}

// A ResNet of basic blocks for small images (no max-pool after the stem):
// widths[s] channels in stage s, `blocks` blocks per stage, the first block
// of every stage after the first downsampling by 2.
std::vector<LayerDesc> resnet(std::int64_t stem, const std::vector<std::int64_t>& widths,
                              int blocks) {
  std::vector<LayerDesc> l;
  l.push_back(conv("conv1", stem, 3, 1, 1, false, false));
  l.push_back(simple(LayerType::kBatchNorm, "bn1"));
  l.push_back(simple(LayerType::kRelu, "relu1"));
  std::string input = "relu1";
  for (std::size_t s = 0; s < widths.size(); ++s) {
    for (int b = 0; b < blocks; ++b) {
      std::string prefix = "s";  // built by append: GCC 12 warns (-Wrestrict) on "s" + string
      prefix.append(std::to_string(s + 1)).append("b").append(std::to_string(b + 1));
      basic_block(l, prefix, input, widths[s], s > 0 && b == 0 ? 2 : 1);
      input = prefix + ".out";
    }
  }
  l.push_back(simple(LayerType::kGlobalAvgPool, "pool"));
  l.push_back(fc("fc", 0, false));
  return l;
}

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

std::string describe_node(const Graph& g, const Node& n) {
  const LayerDesc& a = n.attr;
  std::string s(layer_type_name(n.type));
  const auto k = std::to_string(a.kernel);
  switch (n.type) {
    case LayerType::kConv:
      s += " " + k + "x" + k + "/" + std::to_string(a.stride) + " pad " + std::to_string(a.pad) +
           (a.bias ? "" : " no-bias") + (a.weight_norm ? " wn" : "");
      break;
    case LayerType::kFc:
      s += std::string(a.bias ? "" : " no-bias") + (a.weight_norm ? " wn" : "");
      break;
    case LayerType::kMaxPool:
    case LayerType::kAvgPool:
      s += " " + k + "x" + k + "/" + std::to_string(a.stride) +
           (a.pad > 0 ? " pad " + std::to_string(a.pad) : "");
      break;
    case LayerType::kDropout: {
      char buf[32];
      std::snprintf(buf, sizeof(buf), " %g", a.rate);
      s += buf;
      break;
    }
    case LayerType::kAdd: {
      const int other = n.inputs[1];
      s += " " + (other == kGraphInput ? std::string("input")
                                       : g.nodes[static_cast<std::size_t>(other)].name);
      break;
    }
    default:
      break;
  }
  if (n.relu) s += " +relu";
  return s;
}

}  // namespace

std::string shape_string(const std::vector<std::int64_t>& shape) {
  std::string out;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += 'x';
    out += std::to_string(shape[i]);
  }
  return out;
}

Graph build_graph(const GraphSpec& spec) { return Builder(spec).build(); }

GraphSpec model_description(const ModelSpec& spec) {
  if (spec.classes < 2) {
    throw ConfigError("model needs at least 2 classes, got " + std::to_string(spec.classes));
  }
  GraphSpec g;
  g.name = spec.name();
  g.channels = spec.channels;
  g.height = spec.height;
  g.width = spec.width;
  g.classes = spec.classes;
  const bool wn = spec.weight_norm;
  if (!spec.layers.empty() && spec.model != Builtin::kCustom) {
    throw ConfigError("model.layers describes a model, but model.name = \"" + spec.name() +
                      "\" is a built-in; set model.name = \"custom\" to use the layers");
  }
  switch (spec.model) {
    case Builtin::kCnn:
      // The paper's App. A.1 network.
      g.layers = {conv("conv1", 32, 3, 1, 1, true, wn),
                  simple(LayerType::kRelu),
                  maxpool2(),
                  conv("conv2", 64, 3, 1, 1, true, wn),
                  simple(LayerType::kRelu),
                  maxpool2(),
                  fc("fc1", 256, wn),
                  simple(LayerType::kRelu),
                  fc("fc2", 0, wn)};
      break;
    case Builtin::kMlp:
      if (spec.mlp_hidden < 1) {
        throw ConfigError("model.mlp_hidden must be >= 1, got " + std::to_string(spec.mlp_hidden));
      }
      g.layers = {fc("fc1", spec.mlp_hidden, wn), simple(LayerType::kRelu), fc("fc2", 0, wn)};
      break;
    case Builtin::kLogreg:
      g.layers = {fc("fc1", 0, wn)};
      break;
    case Builtin::kResnet20:
      // He et al. 2016, section 4.2: 6n + 2 layers with n = 3.
      g.layers = resnet(16, {16, 32, 64}, 3);
      break;
    case Builtin::kResnet18:
      // The 18-layer ResNet of He et al. 2016 with a 3x3 stem and no max-pool,
      // as usual for 32x32 inputs.
      g.layers = resnet(64, {64, 128, 256, 512}, 2);
      break;
    case Builtin::kCustom:
      if (spec.layers.empty()) {
        throw ConfigError(
            "model.name = \"custom\" needs its layers as [[model.layers]] tables (docs/models.md)");
      }
      g.layers = spec.layers;
      break;
  }
  return g;
}

Graph model_graph(const ModelSpec& spec) { return build_graph(model_description(spec)); }

void init_params(const Graph& graph, float* params, std::uint64_t seed) {
  const ParamLayout& layout = graph.layout;
  // The classifier (the last weight tensor) starts small: He scaling keeps
  // the activations' variance through the ReLU layers, but max-pooling grows
  // it, so He-scaled logits start around std 3 and the first steps see a
  // loss of 5-8 and jump. LeCun scale times 0.1 gives logits near 0 and an
  // initial loss near ln(classes), as with PyTorch's default init.
  std::size_t classifier = layout.views.size();
  for (std::size_t i = 0; i < layout.views.size(); ++i) {
    const ParamRole r = layout.views[i].role;
    if (r == ParamRole::kWeight || r == ParamRole::kDirection) classifier = i;
  }
  Normal normal(seed);
  for (std::size_t vi = 0; vi < layout.views.size(); ++vi) {
    const ParamView& v = layout.views[vi];
    float* p = params + v.offset;
    switch (v.role) {
      case ParamRole::kWeight:
      case ParamRole::kDirection: {
        const double fan_in = static_cast<double>(v.count / static_cast<std::size_t>(v.shape[0]));
        const double std_dev =
            vi == classifier ? 0.1 * std::sqrt(1.0 / fan_in) : std::sqrt(2.0 / fan_in);
        for (std::size_t i = 0; i < v.count; ++i)
          p[i] = static_cast<float>(std_dev * normal.next());
        break;
      }
      case ParamRole::kGain: {
        // g = ||v|| per unit, so the initial effective weight is v; v is
        // the view just before (the layout's order).
        const ParamView& dir = layout.views[vi - 1];
        const std::size_t fan_in = dir.count / v.count;
        for (std::size_t o = 0; o < v.count; ++o) {
          double ss = 0.0;
          const float* vo = params + dir.offset + o * fan_in;
          for (std::size_t i = 0; i < fan_in; ++i) ss += static_cast<double>(vo[i]) * vo[i];
          p[o] = static_cast<float>(std::sqrt(ss));
        }
        break;
      }
      case ParamRole::kScale:
        std::fill(p, p + v.count, 1.0f);
        break;
      case ParamRole::kBias:
      case ParamRole::kShift:
        std::fill(p, p + v.count, 0.0f);
        break;
    }
  }
}

std::vector<double> group_flops_shares(const Graph& graph) {
  std::vector<double> flops(graph.groups.size(), 0.0);
  if (flops.empty()) return flops;
  std::size_t g = 0;
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    while (g + 1 < graph.groups.size() && static_cast<int>(n) >= graph.groups[g + 1].node) ++g;
    flops[g] += static_cast<double>(graph.nodes[n].flops);
  }
  double total = 0.0;
  for (const double f : flops) total += f;
  for (double& f : flops) f = total > 0.0 ? f / total : 1.0 / static_cast<double>(flops.size());
  return flops;
}

std::string graph_summary(const Graph& graph) {
  // snprintf into a string sized by its first call: a custom layer name of
  // any length keeps its row.
  const auto format = [](const char* fmt, auto... args) {
    std::string out(static_cast<std::size_t>(std::snprintf(nullptr, 0, fmt, args...)), '\0');
    std::snprintf(out.data(), out.size() + 1, fmt, args...);
    return out;
  };
  std::ostringstream os;
  os << format("model %s, input %s, %lld outputs\n", graph.name.c_str(),
               shape_string(graph.input).c_str(), static_cast<long long>(graph.outputs));
  std::size_t width = 4;
  for (const Node& n : graph.nodes) width = std::max(width, n.name.size());
  os << format("  %-*s  %-28s %-12s %10s %12s\n", static_cast<int>(width), "name", "layer",
               "output", "params", "MFLOPs/ex");
  for (const Node& n : graph.nodes) {
    os << format("  %-*s  %-28s %-12s %10zu %12.3f\n", static_cast<int>(width), n.name.c_str(),
                 describe_node(graph, n).c_str(), shape_string(n.out).c_str(), n.param_count,
                 static_cast<double>(n.flops) / 1e6);
  }
  os << format(
      "  total: %zu params (%.2f MB as float32) in %zu tensors, %.2f MFLOPs forward per "
      "example (training: about 3x)",
      graph.layout.count, static_cast<double>(graph.layout.count) * 4.0 / 1e6,
      graph.layout.views.size(), static_cast<double>(graph.flops) / 1e6);
  return os.str();
}

}  // namespace syncopt::nn
