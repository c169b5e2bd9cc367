// The resolved config written back as TOML, and the key reference printed
// by `syncopt train --help` and kept in configs/README.md. The key table,
// loading and validation live beside this file (keys.cpp, load.cpp,
// validate.cpp).
#include "config/config.hpp"

#include "config/keys.hpp"
#include "config/text.hpp"
#include "config/validate.hpp"
#include "config/values.hpp"

namespace syncopt::config {

using namespace detail;

std::vector<std::string> validate(const Config& cfg) {
  std::vector<std::string> out;
  for (auto& p : check(cfg)) out.push_back(std::move(p.message));
  return out;
}

std::string to_toml(const Config& cfg) {
  std::string out;
  std::string_view section;
  for (const auto& spec : key_specs()) {
    if (spec.section != section) {
      if (!out.empty()) out += '\n';
      section = spec.section;
      out += '[';
      out += section;
      out += "]\n";
    }
    out += spec.key;
    out += " = " + format_value(spec, cfg) + "\n";
  }
  return out;
}

std::string key_reference() {
  const Config defaults;
  std::string out =
      "Configuration keys. A TOML file has sections [run], [data], ...; every key has\n"
      "a default. Override any key with --set section.key=value (repeatable; the\n"
      "value is TOML, bare text is taken as a string). Unknown keys are errors.\n";
  std::string_view section;
  for (const auto& spec : key_specs()) {
    if (spec.section != section) {
      section = spec.section;
      out += "\n[" + std::string(section) + "]\n";
    }
    std::string head = "  " + spec.path() + " = " + format_value(spec, defaults);
    std::string allowed = spec.type == KeyType::kUint ? "integer" : type_name(spec.type);
    if (spec.type == KeyType::kEnum) allowed += ", one of " + join(spec.choices(), " | ");
    if (has_range(spec.range)) {
      allowed += spec.type == KeyType::kIntList ? ", each " : ", ";
      allowed += range_text(spec.range);
    }
    if (!spec.rule.empty()) allowed += ", " + std::string(spec.rule);
    constexpr std::size_t kColumn = 42;
    head += head.size() < kColumn ? std::string(kColumn - head.size(), ' ') : "  ";
    out += head + allowed + "\n" + wrap(spec.meaning, "      ", 80);
  }
  return out;
}

}  // namespace syncopt::config
