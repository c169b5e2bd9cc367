// Values of keys as TOML text, and TOML values into keys (see values.hpp).
#include "config/values.hpp"

#include "config/model_layers.hpp"
#include "config/text.hpp"

namespace syncopt::config::detail {

namespace {

constexpr std::string_view kAutoWord = "auto";

}  // namespace

std::string type_name(KeyType type) {
  switch (type) {
    case KeyType::kString:
    case KeyType::kEnum:
      return "string";
    case KeyType::kInt:
      return "integer";
    case KeyType::kUint:
      return "integer >= 0";
    case KeyType::kFloat:
      return "float";
    case KeyType::kBool:
      return "boolean";
    case KeyType::kIntList:
      return "list of integers";
    case KeyType::kCountOrAuto:
      return "integer or \"auto\"";
    case KeyType::kFloatOrAuto:
      return "float or \"auto\"";
    case KeyType::kLayers:
      return "array of layer tables";
  }
  return "?";
}

std::string format_value(const KeySpec& spec, const Config& cfg) {
  switch (spec.type) {
    case KeyType::kString:
      return toml_string(field_of<std::string>(spec, cfg));
    case KeyType::kEnum:
      return toml_string(spec.enum_ops->name_of(spec.field(const_cast<Config&>(cfg))));
    case KeyType::kInt:
      return std::to_string(field_of<std::int64_t>(spec, cfg));
    case KeyType::kCountOrAuto: {
      const auto& v = field_of<CountOrAuto>(spec, cfg);
      return is_auto(v) ? toml_string(kAutoWord) : std::to_string(std::get<std::int64_t>(v));
    }
    case KeyType::kFloatOrAuto: {
      const auto& v = field_of<FloatOrAuto>(spec, cfg);
      return is_auto(v) ? toml_string(kAutoWord) : toml_float(std::get<double>(v));
    }
    case KeyType::kUint:
      return std::to_string(field_of<std::uint64_t>(spec, cfg));
    case KeyType::kFloat:
      return toml_float(field_of<double>(spec, cfg));
    case KeyType::kBool:
      return field_of<bool>(spec, cfg) ? "true" : "false";
    case KeyType::kIntList: {
      std::string out = "[";
      for (const auto v : field_of<std::vector<std::int64_t>>(spec, cfg)) {
        if (out.size() > 1) out += ", ";
        out += std::to_string(v);
      }
      return out + "]";
    }
    case KeyType::kLayers:
      return layers_toml(field_of<std::vector<nn::LayerDesc>>(spec, cfg));
  }
  return "?";
}

std::string example_value(const KeySpec& spec) {
  if (spec.type == KeyType::kIntList) return "[0, 2]";
  if (spec.type == KeyType::kLayers) return "[{ type = \"fc\" }]";
  const std::string def = format_value(spec, Config{});
  if (def == "\"\"") return "\"path/to/file\"";
  return def;
}

std::string describe(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string: {
      std::string s = node.as_string()->get();
      if (s.size() > 40) s = s.substr(0, 37) + "...";
      return "string " + toml_string(s);
    }
    case toml::node_type::integer:
      return "integer " + std::to_string(node.as_integer()->get());
    case toml::node_type::floating_point:
      return "float " + format_number(node.as_floating_point()->get());
    case toml::node_type::boolean:
      return std::string("boolean ") + (node.as_boolean()->get() ? "true" : "false");
    case toml::node_type::array:
      return "array";
    case toml::node_type::table:
      return "table";
    case toml::node_type::date:
      return "date";
    case toml::node_type::time:
      return "time";
    case toml::node_type::date_time:
      return "date-time";
    case toml::node_type::none:
      return "nothing";
  }
  return "?";
}

namespace {

// The value is of another TOML type than the key's.
AssignError mismatch(const KeySpec& spec, const toml::node& node) {
  return AssignError{"expected " + type_name(spec.type) + ", found " + describe(node)};
}

// One of the key's words, or the closest one named.
std::optional<AssignError> assign_enum(const KeySpec& spec, const toml::node& node, Config& cfg) {
  const auto* v = node.as_string();
  if (v == nullptr) return mismatch(spec, node);
  if (spec.enum_ops->set(spec.field(cfg), v->get())) return std::nullopt;
  std::string msg = spec.path() + " = " + toml_string(v->get()) + ": must be one of " +
                    join(spec.choices(), " | ");
  if (const auto near = closest(v->get(), spec.choices()); !near.empty()) {
    msg += " (did you mean \"" + std::string(near) + "\"?)";
  }
  return AssignError{msg, true};
}

// A TOML value of type V (an integer, a float, ...) into a field of type T.
template <class T, class V>
std::optional<AssignError> assign_as(const KeySpec& spec, const toml::node& node, Config& cfg) {
  const auto* v = node.as<V>();
  if (v == nullptr) return mismatch(spec, node);
  field_of<T>(spec, cfg) = static_cast<T>(v->get());
  return std::nullopt;
}

std::optional<AssignError> assign_count_or_auto(const KeySpec& spec, const toml::node& node,
                                                Config& cfg) {
  if (const auto* v = node.as_integer()) {
    field_of<CountOrAuto>(spec, cfg) = v->get();
    return std::nullopt;
  }
  const auto* v = node.as_string();
  if (v == nullptr) return mismatch(spec, node);
  if (v->get() != kAutoWord) {
    return AssignError{"expected integer or \"auto\", found " + describe(node)};
  }
  field_of<CountOrAuto>(spec, cfg) = AutoCount{};
  return std::nullopt;
}

std::optional<AssignError> assign_uint(const KeySpec& spec, const toml::node& node, Config& cfg) {
  const auto* v = node.as_integer();
  if (v == nullptr || v->get() < 0) return mismatch(spec, node);
  field_of<std::uint64_t>(spec, cfg) = static_cast<std::uint64_t>(v->get());
  return std::nullopt;
}

// A float, or an integer taken as one.
std::optional<AssignError> assign_float_or_auto(const KeySpec& spec, const toml::node& node,
                                                Config& cfg) {
  if (const auto* v = node.as_integer()) {
    field_of<FloatOrAuto>(spec, cfg) = static_cast<double>(v->get());
    return std::nullopt;
  }
  if (const auto* v = node.as_floating_point()) {
    field_of<FloatOrAuto>(spec, cfg) = v->get();
    return std::nullopt;
  }
  const auto* v = node.as_string();
  if (v == nullptr) return mismatch(spec, node);
  if (v->get() != kAutoWord) {
    return AssignError{"expected float or \"auto\", found " + describe(node)};
  }
  field_of<FloatOrAuto>(spec, cfg) = AutoCount{};
  return std::nullopt;
}

std::optional<AssignError> assign_float(const KeySpec& spec, const toml::node& node, Config& cfg) {
  if (node.as_integer() != nullptr) return assign_as<double, std::int64_t>(spec, node, cfg);
  return assign_as<double, double>(spec, node, cfg);
}

std::optional<AssignError> assign_int_list(const KeySpec& spec, const toml::node& node,
                                           Config& cfg) {
  const auto* arr = node.as_array();
  if (arr == nullptr) return mismatch(spec, node);
  std::vector<std::int64_t> values;
  for (std::size_t i = 0; i < arr->size(); ++i) {
    const auto* v = arr->get(i)->as_integer();
    if (v == nullptr) {
      return AssignError{"element " + std::to_string(i) + ": expected integer, found " +
                         describe(*arr->get(i))};
    }
    values.push_back(v->get());
  }
  field_of<std::vector<std::int64_t>>(spec, cfg) = std::move(values);
  return std::nullopt;
}

}  // namespace

std::optional<AssignError> assign(const KeySpec& spec, const toml::node& node, Config& cfg) {
  switch (spec.type) {
    case KeyType::kEnum:
      return assign_enum(spec, node, cfg);
    case KeyType::kString:
      return assign_as<std::string, std::string>(spec, node, cfg);
    case KeyType::kInt:
      return assign_as<std::int64_t, std::int64_t>(spec, node, cfg);
    case KeyType::kCountOrAuto:
      return assign_count_or_auto(spec, node, cfg);
    case KeyType::kFloatOrAuto:
      return assign_float_or_auto(spec, node, cfg);
    case KeyType::kUint:
      return assign_uint(spec, node, cfg);
    case KeyType::kFloat:
      return assign_float(spec, node, cfg);
    case KeyType::kBool:
      return assign_as<bool, bool>(spec, node, cfg);
    case KeyType::kLayers:
      if (auto why = read_layers(node, field_of<std::vector<nn::LayerDesc>>(spec, cfg))) {
        return AssignError{spec.path() + ": " + *why, true};
      }
      return std::nullopt;
    case KeyType::kIntList:
      return assign_int_list(spec, node, cfg);
  }
  return mismatch(spec, node);
}

}  // namespace syncopt::config::detail
