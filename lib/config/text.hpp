// Text helpers of the config module: trimming, TOML literals that read
// back to the same value, wrapping for --help, typo distance. Internal to
// lib/config/.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "common/suggest.hpp"

namespace syncopt::config::detail {

std::string trim(std::string_view s);
std::string join(const std::vector<std::string_view>& items, std::string_view sep);
std::vector<std::string> split_lines(const std::string& text);
std::string join_lines(const std::vector<std::string>& lines);
// Shortest text that reads back to the same double (to_chars round-trips).
std::string format_number(double v);
// A TOML float literal: "1" would read back as an integer, so add ".0".
std::string toml_float(double v);
// A TOML basic string, escaped so that any text reads back unchanged.
std::string toml_string(std::string_view s);
// `text` as lines of at most `width` characters, each starting with `indent`.
std::string wrap(std::string_view text, std::string_view indent, std::size_t width);
// `text` on one line: control characters escaped as in TOML ("\\n").
std::string printable(std::string_view text);
// Whether `s` is well-formed UTF-8 (no overlong forms, surrogates or code
// points above U+10FFFF).
bool valid_utf8(std::string_view s);
// Typo hints (common/suggest.hpp), visible here as detail::closest.
using syncopt::closest;

}  // namespace syncopt::config::detail
