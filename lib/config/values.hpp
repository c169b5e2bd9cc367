// A key's value as TOML text, and a TOML value stored into a key's field,
// both driven by the key's type in the key table. Internal to lib/config/.
#pragma once

#include <toml++/toml.h>

#include <optional>
#include <string>

#include "config/keys.hpp"

namespace syncopt::config::detail {

std::string type_name(KeyType type);
// The value of `spec` in `cfg` as TOML text.
std::string format_value(const KeySpec& spec, const Config& cfg);
// A valid value to show in "write e.g. ..." hints.
std::string example_value(const KeySpec& spec);
// "string \"abc\"", "float 0.5", "array", ... for "found ..." in messages.
std::string describe(const toml::node& node);

// Why a value could not be stored: a phrase to put after the key
// ("expected integer, found string \"abc\""), or, when `whole`, a complete
// problem naming the key and its value (an enum name that is not one).
struct AssignError {
  std::string text;
  bool whole = false;
};

// Stores `node` into the field of `spec`, or says why it cannot. An integer
// is accepted where a float is expected; nothing else is converted.
std::optional<AssignError> assign(const KeySpec& spec, const toml::node& node, Config& cfg);

}  // namespace syncopt::config::detail
