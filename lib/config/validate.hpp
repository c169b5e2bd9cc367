// Validation of a fully built config: each key against its own type and
// range, then the rules across keys. Pure, so every rank agrees. Internal
// to lib/config/ (config::validate() is the public face).
#pragma once

#include <string>
#include <vector>

#include "config/keys.hpp"

namespace syncopt::config::detail {

struct Problem {
  std::string key;      // "section.key": where the problem is attributed
  std::string message;  // "train.batch = 0: must be >= 1"
};

std::vector<Problem> check(const Config& cfg);

bool has_range(const Range& r);
// ">= 1", "> 0", "in [0, 1)".
std::string range_text(const Range& r);

}  // namespace syncopt::config::detail
