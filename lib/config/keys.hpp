// The key table: one row per config key (section, name, type, range, a
// further rule, meaning). It drives the TOML reader and `--set`
// (config/load.cpp), validation (config/validate.cpp), to_toml() and the
// key reference (config/config.cpp), so none of them can drift from the
// others. Internal to lib/config/.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "config/config.hpp"

namespace syncopt::config::detail {

inline constexpr double kInf = std::numeric_limits<double>::infinity();
// TOML integers are signed 64-bit.
inline constexpr std::uint64_t kMaxTomlInt =
    static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
// The largest value of a key that the code narrows to int (a batch, a layer
// width, a thread count): the range says so, so that 2^32 + 1 is an error
// and never a batch of 1.
inline constexpr double kIntMax = std::numeric_limits<int>::max();

enum class KeyType {
  kString,
  kInt,
  kUint,
  kFloat,
  kBool,
  kIntList,
  kEnum,
  kCountOrAuto,
  kFloatOrAuto,
  kLayers
};

// How the key table reads and writes an enum field without knowing its type.
struct EnumOps {
  std::vector<std::string_view> (*names)();
  std::string_view (*name_of)(const void* field);
  bool (*set)(void* field, std::string_view name);  // false: not a name of the enum
};

template <class E>
const EnumOps* enum_ops() {
  if constexpr (ConfigEnum<E>) {
    static const EnumOps ops{&enum_names<E>,
                             [](const void* f) { return enum_name(*static_cast<const E*>(f)); },
                             [](void* f, std::string_view name) {
                               const auto v = enum_from_name<E>(name);
                               if (v) *static_cast<E*>(f) = *v;
                               return v.has_value();
                             }};
    return &ops;
  } else {
    return nullptr;
  }
}

// The KeyType of a config field's C++ type; a field of any other type does not compile.
template <class T>
constexpr KeyType key_type_of() {
  if constexpr (std::is_same_v<T, std::string>) {
    return KeyType::kString;
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    return KeyType::kInt;
  } else if constexpr (std::is_same_v<T, std::uint64_t>) {
    return KeyType::kUint;
  } else if constexpr (std::is_same_v<T, double>) {
    return KeyType::kFloat;
  } else if constexpr (std::is_same_v<T, bool>) {
    return KeyType::kBool;
  } else if constexpr (ConfigEnum<T>) {
    return KeyType::kEnum;
  } else if constexpr (std::is_same_v<T, CountOrAuto>) {
    return KeyType::kCountOrAuto;
  } else if constexpr (std::is_same_v<T, FloatOrAuto>) {
    return KeyType::kFloatOrAuto;
  } else if constexpr (std::is_same_v<T, std::vector<nn::LayerDesc>>) {
    return KeyType::kLayers;  // read and written by config/model_layers.cpp
  } else {
    static_assert(std::is_same_v<T, std::vector<std::int64_t>>,
                  "config field of an unsupported type");
    return KeyType::kIntList;
  }
}

// Numeric bounds of a key (of each element for a list; of the count of a
// count-or-auto). Checked by validation and printed by the key reference.
struct Range {
  double lo = -kInf;
  bool lo_open = false;
  double hi = kInf;
  bool hi_open = false;
};

inline Range no_range() { return {}; }
inline Range at_least(double lo) { return {lo, false, kInf, false}; }
inline Range above(double lo) { return {lo, true, kInf, false}; }
inline Range within(double lo, bool lo_open, double hi, bool hi_open) {
  return {lo, lo_open, hi, hi_open};
}
// lo .. INT_MAX, for a key read into an int.
inline Range int_from(double lo) { return {lo, false, kIntMax, false}; }

struct KeySpec {
  std::string_view section;
  std::string_view key;
  KeyType type;
  void* (*field)(Config&);
  const EnumOps* enum_ops;  // kEnum: the enum's names
  Range range;
  std::string_view rule;  // a further rule, for the reference ("" = none)
  std::string_view meaning;

  std::string path() const { return std::string(section) + "." + std::string(key); }
  // The allowed names of an enum key (empty for other keys).
  std::vector<std::string_view> choices() const {
    return enum_ops != nullptr ? enum_ops->names() : std::vector<std::string_view>{};
  }
};

template <class T>
T& field_of(const KeySpec& spec, Config& cfg) {
  return *static_cast<T*>(spec.field(cfg));
}
template <class T>
const T& field_of(const KeySpec& spec, const Config& cfg) {
  // Read-only use of the one accessor; the object is never written through it.
  return *static_cast<const T*>(spec.field(const_cast<Config&>(cfg)));
}

// Every key, in section order (the order of to_toml() and the reference).
const std::vector<KeySpec>& key_specs();
// The sections, in order.
const std::vector<std::string_view>& sections();
bool is_section(std::string_view name);
const KeySpec* find_spec(std::string_view section, std::string_view key);
// The spec of a key that must exist (an InternalError otherwise).
const KeySpec& spec_of(std::string_view section, std::string_view key);
std::vector<std::string_view> keys_of(std::string_view section);
// What to say after "unknown key section.key" / "unknown section [x]".
std::string unknown_key_hint(std::string_view section, std::string_view key);
std::string unknown_section_hint(std::string_view section);

}  // namespace syncopt::config::detail
