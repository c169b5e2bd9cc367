// Reading and writing model.layers (see model_layers.hpp).
#include "config/model_layers.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>
#include <utility>

#include "config/text.hpp"
#include "config/values.hpp"

namespace syncopt::config {

namespace {

using detail::closest;
using detail::format_number;
using detail::join;
using detail::toml_float;
using detail::toml_string;
using nn::LayerType;

// The type a misspelt or foreign type name most likely means: the closest
// of our names, or of names other tools use for them ("batchnorm", "linear").
std::string_view suggest_type(std::string_view word) {
  static const std::vector<std::pair<std::string_view, std::string_view>> kOtherNames = {
      {"batchnorm", "bn"},       {"batch_norm", "bn"},
      {"batchnorm2d", "bn"},     {"linear", "fc"},
      {"dense", "fc"},           {"innerproduct", "fc"},
      {"fully_connected", "fc"}, {"conv2d", "conv"},
      {"convolution", "conv"},   {"max_pool", "maxpool"},
      {"maxpool2d", "maxpool"},  {"avg_pool", "avgpool"},
      {"avgpool2d", "avgpool"},  {"global_avgpool", "gap"},
      {"globalavgpool", "gap"},  {"global_avg_pool", "gap"},
      {"residual", "add"},       {"shortcut", "add"},
      {"eltwise", "add"},        {"sum", "add"},
  };
  std::vector<std::string_view> candidates = nn::layer_type_names();
  for (const auto& [other, ours] : kOtherNames) candidates.push_back(other);
  const std::string_view near = closest(word, candidates);
  for (const auto& [other, ours] : kOtherNames) {
    if (near == other) return ours;
  }
  return near;
}

std::string quoted(std::string_view s) { return toml_string(s); }

using detail::describe;  // the key table's wording (config/values.hpp)

// One layer table being read; its problems go to `problems`.
class LayerReader {
 public:
  LayerReader(std::size_t index, const toml::node& node, std::vector<std::string>& problems)
      : m_index(index), m_node(node), m_problems(problems) {}

  std::optional<nn::LayerDesc> read() {
    const toml::table* table = m_node.as_table();
    if (table == nullptr) {
      problem("expected a table such as { type = \"conv\", out = 16 }, found " + describe(m_node));
      return std::nullopt;
    }
    nn::LayerDesc d;
    if (const toml::node* name = table->get("name")) {
      if (const auto* s = name->as_string(); s != nullptr && !s->get().empty()) {
        d.name = s->get();
      } else {
        problem("name: expected a non-empty string, found " + describe(*name));
      }
    }
    const toml::node* type = table->get("type");
    const auto* type_name = type != nullptr ? type->as_string() : nullptr;
    if (type_name == nullptr) {
      problem((type == nullptr ? std::string("no type")
                               : "type: expected a string, found " + describe(*type)) +
              "; write type = \"conv\" (the types: " + join(nn::layer_type_names(), ", ") + ")");
      return std::nullopt;
    }
    const auto parsed = nn::layer_type_from_name(type_name->get());
    if (!parsed) {
      const std::string_view near = suggest_type(type_name->get());
      problem("unknown type " + quoted(type_name->get()) +
              (near.empty() ? "; the types are: " + join(nn::layer_type_names(), ", ")
                            : "; did you mean " + quoted(near) + "?"));
      return std::nullopt;
    }
    d.type = *parsed;
    m_type = *parsed;
    m_name = d.name;
    const auto allowed = nn::layer_attributes(d.type);
    for (auto&& [key_node, value] : *table) {
      const std::string_view key = key_node.str();
      if (key == "type" || key == "name") continue;
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        unknown_attribute(key);
        continue;
      }
      read_attribute(key, value, d);
    }
    if (d.type == LayerType::kConv && table->get("out") == nullptr) {
      problem("a conv needs out = <output channels>");
    }
    if (d.type == LayerType::kAdd && d.from.empty() && table->get("from") == nullptr) {
      problem("an add needs from = \"<name of an earlier layer>\" (or \"input\")");
    }
    return d;
  }

 private:
  void problem(const std::string& what) {
    std::string where = "layer " + std::to_string(m_index + 1);
    const auto line = m_node.source().begin.line;
    std::string detail;
    if (line > 0) detail = "line " + std::to_string(line);
    if (!m_name.empty()) detail += (detail.empty() ? "" : ", ") + quoted(m_name);
    if (m_type) detail += (detail.empty() ? "" : ", ") + std::string(nn::layer_type_name(*m_type));
    if (!detail.empty()) where += " (" + detail + ")";
    m_problems.push_back(where + ": " + what);
  }

  void unknown_attribute(std::string_view key) {
    const auto allowed = nn::layer_attributes(*m_type);
    std::vector<std::string_view> all = allowed;
    all.push_back("name");
    for (std::size_t t = 0; t < nn::layer_type_names().size(); ++t) {
      const auto others = nn::layer_attributes(static_cast<LayerType>(t));
      if (std::find(others.begin(), others.end(), key) != others.end()) {
        std::string msg = "'";  // built in steps: GCC 12 warns falsely on "..." + string&&
        msg += key;
        problem(msg + "' is not an attribute of " + std::string(nn::layer_type_name(*m_type)) +
                " (" + std::string(nn::layer_type_names()[t]) + " has it); " +
                std::string(nn::layer_type_name(*m_type)) +
                " takes: " + (allowed.empty() ? std::string("name only") : join(all, ", ")));
        return;
      }
    }
    if (const auto near = closest(key, all); !near.empty()) {
      problem("unknown attribute '" + std::string(key) + "'; did you mean '" + std::string(near) +
              "'?");
      return;
    }
    problem("unknown attribute '" + std::string(key) + "'; " +
            std::string(nn::layer_type_name(*m_type)) +
            " takes: " + (allowed.empty() ? std::string("name only") : join(all, ", ")));
  }

  std::optional<std::int64_t> integer(std::string_view key, const toml::node& v, std::int64_t lo) {
    const auto* i = v.as_integer();
    if (i == nullptr) {
      problem(std::string(key) + ": expected an integer, found " + describe(v));
      return std::nullopt;
    }
    // Shapes are read into ints by the backends: a larger one is an error here.
    constexpr std::int64_t kMax = std::numeric_limits<int>::max();
    if (i->get() < lo || i->get() > kMax) {
      problem(std::string(key) + " = " + std::to_string(i->get()) + ": must be " +
              (i->get() < lo ? ">= " + std::to_string(lo) : "<= " + std::to_string(kMax)));
      return std::nullopt;
    }
    return i->get();
  }

  std::optional<bool> boolean(std::string_view key, const toml::node& v) {
    if (const auto* b = v.as_boolean()) return b->get();
    problem(std::string(key) + ": expected true or false, found " + describe(v));
    return std::nullopt;
  }

  std::optional<double> number(std::string_view key, const toml::node& v) {
    if (const auto* f = v.as_floating_point()) return f->get();
    if (const auto* i = v.as_integer()) return static_cast<double>(i->get());
    problem(std::string(key) + ": expected a number, found " + describe(v));
    return std::nullopt;
  }

  void read_attribute(std::string_view key, const toml::node& v, nn::LayerDesc& d) {
    if (key == "out") {
      if (auto x = integer(key, v, 1)) d.out = *x;
    } else if (key == "kernel") {
      if (auto x = integer(key, v, 1)) d.kernel = *x;
    } else if (key == "stride") {
      if (auto x = integer(key, v, 1)) d.stride = *x;
    } else if (key == "pad") {
      if (auto x = integer(key, v, 0)) d.pad = *x;
    } else if (key == "bias") {
      if (auto x = boolean(key, v)) d.bias = *x;
    } else if (key == "weight_norm") {
      if (auto x = boolean(key, v)) d.weight_norm = *x;
    } else if (key == "eps") {
      if (auto x = number(key, v)) {
        if (*x > 0.0 && std::isfinite(*x)) {
          d.eps = *x;
        } else {
          problem("eps = " + format_number(*x) + ": must be > 0");
        }
      }
    } else if (key == "rate") {
      if (auto x = number(key, v)) {
        if (*x >= 0.0 && *x < 1.0) {
          d.rate = *x;
        } else {
          problem("rate = " + format_number(*x) + ": must be in [0, 1)");
        }
      }
    } else if (key == "from") {
      if (const auto* s = v.as_string(); s != nullptr && !s->get().empty()) {
        d.from = s->get();
      } else {
        problem("from: expected the name of an earlier layer, found " + describe(v));
      }
    } else if (key == "shortcut") {
      const auto* s = v.as_string();
      if (s != nullptr && s->get() == "identity") {
        d.shortcut = nn::Shortcut::kIdentity;
      } else if (s != nullptr && s->get() == "projection") {
        d.shortcut = nn::Shortcut::kProjection;
      } else {
        problem("shortcut: must be \"identity\" or \"projection\", found " + describe(v));
      }
    }
  }

  std::size_t m_index;
  const toml::node& m_node;
  std::vector<std::string>& m_problems;
  std::optional<LayerType> m_type;
  std::string m_name;
};

}  // namespace

std::optional<std::string> read_layers(const toml::node& node, std::vector<nn::LayerDesc>& out) {
  const toml::array* array = node.as_array();
  if (array == nullptr) {
    return "expected an array of layer tables ([[model.layers]] or layers = [{ type = \"conv\", "
           "... }, ...]), found " +
           describe(node);
  }
  std::vector<std::string> problems;
  std::vector<nn::LayerDesc> layers;
  for (std::size_t i = 0; i < array->size(); ++i) {
    if (auto d = LayerReader(i, *array->get(i), problems).read()) layers.push_back(std::move(*d));
  }
  if (problems.empty()) {
    out = std::move(layers);
    return std::nullopt;
  }
  std::string text = std::to_string(problems.size()) +
                     (problems.size() == 1 ? " problem" : " problems") +
                     " in the layers (docs/models.md lists every type and attribute):";
  for (const std::string& p : problems) text += "\n    " + p;
  return text;
}

std::string layers_toml(const std::vector<nn::LayerDesc>& layers) {
  if (layers.empty()) return "[]";
  const nn::LayerDesc defaults;
  std::string out = "[\n";
  for (const nn::LayerDesc& d : layers) {
    std::string t = "  { type = " + quoted(nn::layer_type_name(d.type));
    if (!d.name.empty()) t += ", name = " + quoted(d.name);
    for (const std::string_view key : nn::layer_attributes(d.type)) {
      if (key == "out" && d.out != defaults.out) t += ", out = " + std::to_string(d.out);
      if (key == "kernel" && d.kernel != defaults.kernel) {
        t += ", kernel = " + std::to_string(d.kernel);
      }
      if (key == "stride" && d.stride != defaults.stride) {
        t += ", stride = " + std::to_string(d.stride);
      }
      if (key == "pad" && d.pad != defaults.pad) t += ", pad = " + std::to_string(d.pad);
      if (key == "bias" && d.bias != defaults.bias) t += ", bias = false";
      if (key == "weight_norm" && d.weight_norm != defaults.weight_norm) {
        t += ", weight_norm = true";
      }
      if (key == "eps" && d.eps != defaults.eps) t += ", eps = " + toml_float(d.eps);
      if (key == "rate" && d.rate != defaults.rate) t += ", rate = " + toml_float(d.rate);
      if (key == "from" && !d.from.empty()) t += ", from = " + quoted(d.from);
      if (key == "shortcut" && d.shortcut == nn::Shortcut::kProjection) {
        t += ", shortcut = \"projection\"";
      }
    }
    out += t + " },\n";
  }
  return out + "]";
}

std::string layers_reference() {
  std::string out;
  for (std::size_t t = 0; t < nn::layer_type_names().size(); ++t) {
    const auto attrs = nn::layer_attributes(static_cast<LayerType>(t));
    out += std::string(nn::layer_type_names()[t]) + " (" +
           (attrs.empty() ? std::string("-") : join(attrs, ", ")) + ")";
    if (t + 1 < nn::layer_type_names().size()) out += "; ";
  }
  return out;
}

}  // namespace syncopt::config
