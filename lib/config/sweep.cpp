// Grid sweeps (see sweep.hpp).
#include "config/sweep.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <regex>

#include "common/error.hpp"
#include "config/config.hpp"
#include "config/keys.hpp"

namespace syncopt::config {
namespace {

constexpr std::size_t kMaxRangeValues = 10000;

bool parse_number(const std::string& text, double& out) {
  if (text.empty()) return false;
  char* end = nullptr;
  out = std::strtod(text.c_str(), &end);
  return end == text.c_str() + text.size() && std::isfinite(out);
}

bool is_integer_text(const std::string& t) { return t.find_first_of(".eE") == std::string::npos; }

// "range(a,b[,step])" (b excluded) or "a:b[:step]" (b included): the
// values, or `value` itself when it is neither.
std::vector<std::string> expand_range(const std::string& arg, const std::string& value) {
  static const std::regex py(R"(range\(([^,()]+),([^,()]+)(?:,([^,()]+))?\))");
  static const std::regex colon(R"(([^:]+):([^:]+)(?::([^:]+))?)");
  std::smatch m;
  bool inclusive = false;
  if (std::regex_match(value, m, py)) {
    inclusive = false;
  } else if (std::regex_match(value, m, colon)) {
    inclusive = true;
  } else {
    return {value};
  }
  const std::string ta = m[1], tb = m[2], ts = m[3].matched ? std::string(m[3]) : "1";
  double a = 0, b = 0, step = 0;
  if (!parse_number(ta, a) || !parse_number(tb, b) || !parse_number(ts, step)) {
    if (!inclusive)
      throw ConfigError("-m " + arg + ": " + value + ": expected range(start,stop) or " +
                        "range(start,stop,step) of numbers");
    return {value};  // a:b that is no range of numbers (a path, a time): a plain value
  }
  const std::string usage = "-m " + arg + ": " + value + ": ";
  if (step == 0) throw ConfigError(usage + "a step of 0");
  const bool integers = is_integer_text(ta) && is_integer_text(tb) && is_integer_text(ts);
  const double slack = inclusive ? 1e-9 * std::fabs(step) : -1e-9 * std::fabs(step);
  std::vector<std::string> out;
  for (std::size_t i = 0;; ++i) {
    const double v = a + static_cast<double>(i) * step;
    if (step > 0 ? v > b + slack : v < b - slack) break;
    if (out.size() == kMaxRangeValues)
      throw ConfigError(usage + "more than " + std::to_string(kMaxRangeValues) + " values");
    char buf[40];
    if (integers)
      std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(std::llround(v)));
    else
      std::snprintf(buf, sizeof buf, "%.12g", v);
    out.emplace_back(buf);
  }
  if (out.empty())
    throw ConfigError(usage + "no values (the step goes away from the end" +
                      std::string(inclusive ? "" : ", or start = stop: range() excludes the stop") +
                      ")");
  return out;
}

}  // namespace

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
    } else if (c == '[' || c == '(') {
      ++depth;
    } else if (c == ']' || c == ')') {
      --depth;
    } else if (c == ',' && depth == 0) {
      if (value.empty()) throw ConfigError(usage + " (an empty value)");
      for (auto& v : expand_range(arg, value)) axis.values.push_back(std::move(v));
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

void check_axes(const std::vector<SweepAxis>& axes) {
  std::string problems;
  for (const auto& a : axes) {
    const auto dot = a.key.find('.');
    const std::string section = a.key.substr(0, dot), key = a.key.substr(dot + 1);
    if (!detail::is_section(section))
      problems += "\n  -m " + a.key + ": unknown section [" + section + "]" +
                  detail::unknown_section_hint(section);
    else if (detail::find_spec(section, key) == nullptr)
      problems +=
          "\n  -m " + a.key + ": unknown key " + a.key + detail::unknown_key_hint(section, key);
  }
  if (!problems.empty()) throw ConfigError("the sweep names keys that do not exist:" + problems);
}

namespace {

// The problems of a ConfigError, one per entry ("invalid configuration: ...:"
// and its indented lines, or the whole message).
std::vector<std::string> problems_of(const std::string& what) {
  std::vector<std::string> out;
  if (what.rfind("invalid configuration:", 0) != 0) return {what};
  std::size_t pos = what.find('\n');
  while (pos != std::string::npos) {
    const std::size_t next = what.find('\n', pos + 1);
    std::string line = what.substr(pos + 1, next == std::string::npos ? next : next - pos - 1);
    line.erase(0, line.find_first_not_of(' '));
    if (!line.empty()) out.push_back(line);
    pos = next;
  }
  return out;
}

}  // namespace

std::vector<SweepRun> check_runs(const std::string& config_path,
                                 const std::vector<std::string>& overrides,
                                 std::vector<SweepRun> runs) {
  std::vector<std::string> order;                       // problems, first seen first
  std::map<std::string, std::vector<std::string>> who;  // problem -> runs
  std::vector<std::string> resolved(runs.size());
  std::size_t failed = 0;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    auto all = overrides;
    all.insert(all.end(), runs[i].overrides.begin(), runs[i].overrides.end());
    try {
      resolved[i] = load(config_path, all).run.name;
    } catch (const ConfigError& e) {
      ++failed;
      for (const auto& p : problems_of(e.what())) {
        if (who[p].empty()) order.push_back(p);
        who[p].push_back(runs[i].name);
      }
    }
  }
  if (failed > 0) {
    std::string text = "the sweep has runs that are not valid configs (" + std::to_string(failed) +
                       " of " + std::to_string(runs.size()) + " runs):";
    for (const auto& p : order) {
      const auto& names = who[p];
      text += "\n  " + p + "\n    ";
      if (names.size() == runs.size()) {
        text += "in every run";
      } else {
        text +=
            "in " + std::to_string(names.size()) + " run" + (names.size() == 1 ? "" : "s") + ": ";
        for (std::size_t k = 0; k < names.size() && k < 8; ++k) text += (k ? ", " : "") + names[k];
        if (names.size() > 8) text += ", ...";
      }
    }
    throw ConfigError(text);
  }
  const bool templated = std::any_of(resolved.begin(), resolved.end(),
                                     [&](const std::string& n) { return n != resolved.front(); });
  if (!templated) return runs;
  std::map<std::string, std::size_t> seen;
  for (std::size_t i = 0; i < runs.size(); ++i) {
    if (const auto it = seen.find(resolved[i]); it != seen.end())
      throw ConfigError("run.name resolves to '" + resolved[i] + "' for two runs (" +
                        runs[it->second].name + " and " + runs[i].name +
                        "): name them by every swept key, e.g. ${train.backups}");
    seen[resolved[i]] = i;
    runs[i].name = resolved[i];
  }
  return runs;
}

}  // namespace syncopt::config
