// Grid sweeps (see sweep.hpp).
#include "config/sweep.hpp"

#include <algorithm>
#include <cctype>

#include "common/error.hpp"

namespace syncopt::config {

SweepAxis parse_axis(const std::string& arg) {
  const std::string usage =
      "-m " + arg + ": expected section.key=v1,v2,..., e.g. -m train.backups=0,1,2";
  const auto eq = arg.find('=');
  if (eq == std::string::npos || eq == 0) throw ConfigError(usage);
  SweepAxis axis;
  axis.key = arg.substr(0, eq);
  const auto dot = axis.key.find('.');
  if (dot == std::string::npos || dot == 0 || dot + 1 == axis.key.size()) throw ConfigError(usage);
  std::string value;
  int depth = 0;
  char quote = 0;
  for (std::size_t i = eq + 1; i <= arg.size(); ++i) {
    const char c = i < arg.size() ? arg[i] : ',';
    if (quote != 0) {
      if (c == quote) quote = 0;
    } else if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '[') {
      ++depth;
    } else if (c == ']') {
      --depth;
    } else if (c == ',' && depth == 0) {
      if (value.empty()) throw ConfigError(usage + " (an empty value)");
      axis.values.push_back(value);
      value.clear();
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(c))) {
      throw ConfigError("-m " + arg +
                        ": a value with white space (a sweep file splits lines at white space)");
    }
    value += c;
  }
  return axis;
}

namespace {

std::string name_part(const std::string& text) {
  std::string out;
  for (const char c : text) {
    const bool plain =
        std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '+' || c == '_';
    out += plain ? c : '-';
  }
  // ".." is not allowed in a run name.
  for (auto pos = out.find(".."); pos != std::string::npos; pos = out.find("..")) out[pos] = '-';
  return out;
}

}  // namespace

std::vector<SweepRun> expand(const std::vector<SweepAxis>& axes, const std::string& base) {
  // A key swept twice would name runs by values they do not use; a value
  // given twice, or two values that read alike in a name, would give two
  // runs one run directory.
  for (std::size_t a = 0; a < axes.size(); ++a) {
    for (std::size_t o = 0; o < a; ++o) {
      if (axes[o].key == axes[a].key) {
        throw ConfigError("-m " + axes[a].key + " is given twice; give all its values in one -m " +
                          axes[a].key + "=v1,v2,...");
      }
    }
    for (std::size_t i = 0; i < axes[a].values.size(); ++i) {
      for (std::size_t j = 0; j < i; ++j) {
        if (name_part(axes[a].values[i]) == name_part(axes[a].values[j])) {
          throw ConfigError("-m " + axes[a].key + ": the values '" + axes[a].values[j] + "' and '" +
                            axes[a].values[i] +
                            "' would name their runs alike (run names keep letters, digits and "
                            ". - only); give distinct values");
        }
      }
    }
  }
  std::vector<std::string> label(axes.size());
  for (std::size_t a = 0; a < axes.size(); ++a) {
    const std::string shortk = axes[a].key.substr(axes[a].key.find('.') + 1);
    const bool clash = std::count_if(axes.begin(), axes.end(), [&](const SweepAxis& o) {
                         return o.key.substr(o.key.find('.') + 1) == shortk;
                       }) > 1;
    label[a] = clash ? axes[a].key : shortk;
  }
  std::vector<SweepRun> runs{SweepRun{{}, base}};
  for (std::size_t a = 0; a < axes.size(); ++a) {
    std::vector<SweepRun> next;
    for (const auto& r : runs) {
      for (const auto& v : axes[a].values) {
        SweepRun n = r;
        n.overrides.push_back(axes[a].key + "=" + v);
        n.name += '_';
        n.name += name_part(label[a]);
        n.name += '=';
        n.name += name_part(v);
        next.push_back(std::move(n));
      }
    }
    runs = std::move(next);
  }
  return runs;
}

}  // namespace syncopt::config
