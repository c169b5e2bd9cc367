// Interpolation in config values: "${section.key}" is that key's final
// value (after every file and --set), "${env:VAR}" the environment
// variable VAR ("${env:VAR,default}" when it may be unset). A key whose
// value (in a file or a --set) holds "${" is set aside while reading and
// resolved before validation, in the order its references need; the result
// is read as that key's type, as a --set value is, and config.toml holds it
// resolved. Internal to lib/config/.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace syncopt::config::detail {

struct Pending {
  std::string text;   // the value as written, with its ${...}
  std::string where;  // "file:line" or "--set key=value", for messages
};

inline bool has_reference(const std::string& text) { return text.find("${") != std::string::npos; }

// Resolves every pending key. `is_key(path)` says whether section.key
// names a key (else a problem with `hint(path)`); `value_text(path)` is a
// key's current value as plain text (a string without quotes); `assign`
// sets a key from resolved text, returning a problem or nothing. Returns
// every problem: an unclosed "${", a reference to no key, an unset variable,
// a cycle, a resolved value the key does not take. A key that fails is
// reported once; keys that refer to it are not reported again.
std::vector<std::string> resolve(
    const std::map<std::string, Pending>& pending,
    const std::function<bool(const std::string&)>& is_key,
    const std::function<std::string(const std::string&)>& hint,
    const std::function<std::string(const std::string&)>& value_text,
    const std::function<std::optional<std::string>(const std::string& path, const std::string& text,
                                                   const std::string& where)>& assign);

}  // namespace syncopt::config::detail
