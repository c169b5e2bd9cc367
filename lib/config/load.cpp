// Loading a config: the TOML file read key by key against the key table,
// every problem collected with its file and line (duplicate keys and
// sections recovered from, so the rest of the file is still checked), then
// the `--set` overrides, then validation; one ConfigError lists them all.
#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string_view>
#include <utility>

#include "common/error.hpp"
#include "config/config.hpp"
#include "config/include.hpp"
#include "config/interpolate.hpp"
#include "config/keys.hpp"
#include "config/text.hpp"
#include "config/validate.hpp"
#include "config/values.hpp"

namespace syncopt::config {
namespace {

using namespace detail;

// Duplicate keys are recovered from by blanking the offending line and parsing
// again; this bounds the retries on a pathological file.
constexpr int kMaxRecoveries = 64;
constexpr std::string_view kDuplicateTable = "syncopt_repeated_table_at_line_";

// The [header] in force at 1-based line `line` (exclusive), "" at top level.
std::string table_at(const std::vector<std::string>& lines, std::size_t line) {
  for (std::size_t i = std::min(line, lines.size() + 1); i-- > 1;) {
    const std::string t = trim(lines[i - 1]);
    if (t.empty() || t[0] != '[') continue;
    const std::size_t open = t.find_first_not_of('[');
    const std::size_t close = t.find(']', open);
    if (open == std::string::npos || close == std::string::npos) continue;
    return trim(std::string_view(t).substr(open, close - open));
  }
  return {};
}

// The text between the last pair of single quotes of a toml++ message.
std::string quoted_name(std::string_view desc) {
  const auto end = desc.rfind('\'');
  if (end == std::string_view::npos || end == 0) return {};
  const auto begin = desc.rfind('\'', end - 1);
  if (begin == std::string_view::npos) return {};
  return std::string(desc.substr(begin + 1, end - begin - 1));
}

std::string dotted(const std::string& table, const std::string& key) {
  if (table.empty()) return key;
  if (key.empty()) return table;
  return table + "." + key;
}

class Loader {
 public:
  void read_file(const std::string& path) {
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    // A file that is not there, or cannot be read, is a missing input (66,
    // as for data), not a config error (78): nothing was read to be wrong.
    if (!std::filesystem::exists(status)) {
      throw MissingInputError(path +
                              ": config file not found; check the path (relative paths "
                              "start at " +
                              std::filesystem::current_path(ec).string() + ")");
    }
    if (std::filesystem::is_directory(status)) {
      add(path + ": is a directory, not a config file; give the path of a .toml file");
      return;
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      throw MissingInputError(path + ": cannot open the config file (" + std::strerror(errno) +
                              "); check its permissions");
    }
    // The file and what it includes, base first (config/include.hpp).
    std::vector<std::string> include_problems;
    for (const auto& f : resolve_includes(path, include_problems)) read_text(f.text, f.path);
    for (auto& p : include_problems) add(std::move(p));
  }

  void read_text(const std::string& text, const std::string& origin) {
    Reading r{origin, split_lines(text), {}, {}, {}, {}};
    parse_recovering(r);
    report_duplicates(r);
    if (r.doc) read_sections(r);
    std::stable_sort(r.found.begin(), r.found.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& f : r.found) add(std::move(f.second));
  }

 private:
  // One file being read: its lines (edited while recovering), the document
  // once parsed, and the problems found, by line.
  struct Duplicate {
    std::size_t line;
    std::string path;
    bool is_table;
  };
  struct Reading {
    std::string origin;
    std::vector<std::string> lines;
    std::optional<toml::table> doc;
    std::vector<Duplicate> duplicates;
    std::map<std::string, std::string> renamed;  // stand-in table name -> the repeated header's
    std::vector<std::pair<std::size_t, std::string>> found;  // (line, message)
    std::string at(std::size_t line) const { return origin + ":" + std::to_string(line) + ": "; }
  };

  // toml++ stops at its first error. A duplicate key is recovered from by
  // blanking its line, so the rest of the file is still checked; after a
  // syntax error the file cannot be read further.
  static void parse_recovering(Reading& r) {
    for (int attempt = 0; attempt <= kMaxRecoveries && !r.doc; ++attempt) {
      try {
        r.doc = toml::parse(std::string_view(join_lines(r.lines)), std::string_view(r.origin));
      } catch (const toml::parse_error& e) {
        const std::size_t line = e.source().begin.line;
        const std::string desc(e.description());
        const bool in_file =
            line >= 1 && line <= r.lines.size() && !trim(r.lines[line - 1]).empty();
        if (desc.find("cannot redefine existing") != std::string::npos && in_file &&
            attempt < kMaxRecoveries) {
          recover_duplicate(r, line, desc);
          continue;
        }
        std::string near;
        if (in_file) {
          const std::string& t = r.lines[line - 1];
          const auto eq = t.find('=');
          if (eq != std::string::npos && t.find('"') > eq) {
            near =
                " near " + dotted(table_at(r.lines, line), trim(std::string_view(t).substr(0, eq)));
          }
        }
        r.found.emplace_back(line, r.origin + ":" + std::to_string(line) + ":" +
                                       std::to_string(e.source().begin.column) + ": syntax error" +
                                       near + ": " + desc +
                                       "; fix the TOML syntax (https://toml.io); the rest of the "
                                       "file was not checked");
        break;
      }
    }
  }

  static void recover_duplicate(Reading& r, std::size_t line, const std::string& desc) {
    const bool is_table = trim(r.lines[line - 1]).front() == '[';
    const std::string name = quoted_name(desc);
    r.duplicates.push_back(
        {line, is_table ? name : dotted(table_at(r.lines, line), name), is_table});
    if (is_table) {
      // Blanking a repeated [train] would move its keys into the table
      // above; read them under a stand-in name and check them as [train].
      const std::string stand_in = std::string(kDuplicateTable) + std::to_string(line);
      r.renamed[stand_in] = name;
      r.lines[line - 1] = "[" + stand_in + "]";
    } else {
      r.lines[line - 1].clear();
    }
  }

  static void report_duplicates(Reading& r) {
    for (const auto& dup : r.duplicates) {
      std::string first;
      if (r.doc) {
        if (const auto* node = r.doc->at_path(dup.path).node();
            node != nullptr && node->source().begin.line > 0) {
          first = std::to_string(node->source().begin.line);
        }
      }
      if (dup.is_table) {
        r.found.emplace_back(dup.line,
                             r.at(dup.line) + "duplicate section [" + dup.path + "]" +
                                 (first.empty() ? "" : " (first opened on line " + first + ")") +
                                 "; merge them into one [" + dup.path + "] table");
      } else {
        r.found.emplace_back(dup.line,
                             r.at(dup.line) + "duplicate key " + dup.path +
                                 (first.empty() ? "" : " (first set on line " + first + ")") +
                                 "; keep only one of them");
      }
    }
  }

  // Every [section] of the document: known, a table, and its keys.
  void read_sections(Reading& r) {
    for (auto&& [section_key, section_node] : *r.doc) {
      std::string section(section_key.str());
      std::size_t line = section_key.source().begin.line;
      if (line == 0) line = section_node.source().begin.line;
      // The keys of a repeated header, checked as keys of the first one.
      const toml::table* first_table = nullptr;
      if (const auto it = r.renamed.find(section); it != r.renamed.end()) {
        section = it->second;
        first_table = r.doc->get_as<toml::table>(section);
      }
      if (!is_section(section)) {
        r.found.emplace_back(line, r.at(line) + outside_section(section, section_node));
        continue;
      }
      const auto* table = section_node.as_table();
      if (table == nullptr) {
        r.found.emplace_back(line, r.at(line) + section + ": expected a table [" + section +
                                       "], found " + describe(section_node) +
                                       "; write the section as [" + section + "]");
        continue;
      }
      read_keys(r, section, *table, first_table);
    }
  }

  // What to say of a top-level name that is no section.
  static std::string outside_section(const std::string& name, const toml::node& node) {
    if (node.is_table()) return "unknown section [" + name + "]" + unknown_section_hint(name);
    // A key written before any [section] header.
    for (const auto& spec : key_specs()) {
      if (spec.key == name) {
        return "key '" + name + "' is outside any section; put it under [" +
               std::string(spec.section) + "] (" + spec.path() + ")";
      }
    }
    return "key '" + name + "' is outside any section; every key belongs to one of [" +
           join(sections(), "], [") + "]";
  }

  void read_keys(Reading& r, const std::string& section, const toml::table& table,
                 const toml::table* first_table) {
    for (auto&& [key_key, value] : table) {
      const std::string key(key_key.str());
      std::size_t kline = key_key.source().begin.line;
      if (kline == 0) kline = value.source().begin.line;
      if (const toml::node* first = first_table ? first_table->get(key) : nullptr) {
        r.found.emplace_back(
            kline, r.at(kline) + "duplicate key " + section + "." + key + " (first set on line " +
                       std::to_string(first->source().begin.line) + "); keep only one of them");
        continue;
      }
      const KeySpec* spec = find_spec(section, key);
      if (spec == nullptr) {
        r.found.emplace_back(kline, r.at(kline) + "unknown key " + section + "." + key +
                                        unknown_key_hint(section, key));
        continue;
      }
      const std::string origin = r.origin + ":" + std::to_string(kline);
      if (const auto* s = value.as_string(); s != nullptr && has_reference(s->get())) {
        m_pending[spec->path()] = {s->get(), origin};  // resolved in finish()
        m_origin[spec->path()] = origin;
        continue;
      }
      m_pending.erase(spec->path());
      if (auto why = assign(*spec, value, m_cfg)) {
        r.found.emplace_back(kline, why->whole ? r.at(kline) + why->text
                                               : r.at(kline) + spec->path() + ": " + why->text +
                                                     "; write e.g. " + std::string(spec->key) +
                                                     " = " + example_value(*spec));
        m_unread.insert(spec->path());
      } else {
        m_origin[spec->path()] = origin;
      }
    }
  }

 public:
  void apply_override(const std::string& override_text) {
    const std::string where = "--set " + printable(override_text);
    const auto eq = override_text.find('=');
    if (eq == std::string::npos) {
      add(where + ": expected section.key=value, e.g. --set train.batch=64");
      return;
    }
    const std::string path = trim(std::string_view(override_text).substr(0, eq));
    const std::string text = trim(std::string_view(override_text).substr(eq + 1));
    const auto dot = path.find('.');
    if (dot == std::string::npos || dot == 0 || dot + 1 == path.size() ||
        path.find('.', dot + 1) != std::string::npos) {
      add(where + ": '" + path + "' is not section.key; write e.g. --set train.batch=64");
      return;
    }
    const std::string section = path.substr(0, dot);
    const std::string key = path.substr(dot + 1);
    if (!is_section(section)) {
      add(where + ": unknown section [" + section + "]" + unknown_section_hint(section));
      return;
    }
    const KeySpec* spec = find_spec(section, key);
    if (spec == nullptr) {
      add(where + ": unknown key " + path + unknown_key_hint(section, key));
      return;
    }

    if (has_reference(text)) {
      m_pending[path] = {text, where};  // resolved in finish()
      m_origin[path] = where;
      return;
    }
    m_pending.erase(path);
    if (auto why = assign_text(*spec, path, text, where)) {
      add(std::move(*why));
      m_unread.insert(path);
      return;
    }
    m_origin[path] = where;
  }

  // Resolves ${...} (config/interpolate.hpp), validates the result; throws
  // one ConfigError listing every problem.
  Config finish() {
    resolve_pending();
    for (const auto& p : check(m_cfg)) {
      // Custom layers that could not be read are one problem (theirs), not
      // a second one saying that the model has none.
      if (p.key == "model.name" && m_unread.count("model.layers") > 0) continue;
      const auto it = m_origin.find(p.key);
      add(it != m_origin.end() ? it->second + ": " + p.message : p.message);
    }
    if (m_problems.empty()) return m_cfg;
    std::string message =
        "invalid configuration: " + std::to_string(m_problems.size()) +
        (m_problems.size() == 1 ? " problem" : " problems") +
        " (every key is described by `syncopt train --help` and in configs/README.md):";
    for (const auto& p : m_problems) message += "\n  " + p;
    throw ConfigError(message);
  }

 private:
  void add(std::string problem) { m_problems.push_back(std::move(problem)); }

  // A --set value (or a resolved one), read as TOML (`k = <value>`) so that
  // it is typed like the file; the problem, if any.
  std::optional<std::string> assign_text(const KeySpec& spec, const std::string& path,
                                         const std::string& text, const std::string& where) {
    std::optional<toml::table> parsed;
    try {
      auto table = toml::parse(std::string_view("v = " + text));
      if (table.size() == 1 && table.contains("v")) parsed = std::move(table);
    } catch (const toml::parse_error&) {
    }
    const toml::node* node = parsed ? parsed->get("v") : nullptr;
    // Quotes rarely survive the shell: a string key takes the bare text
    // (`--set train.mode=async`) unless it was written as a TOML string.
    const bool named =
        spec.type == KeyType::kString || spec.type == KeyType::kEnum ||
        ((spec.type == KeyType::kCountOrAuto || spec.type == KeyType::kFloatOrAuto) &&
         text == "auto");
    if (named && (node == nullptr || !node->is_string())) {
      const toml::value<std::string> bare(text);
      if (auto why = assign(spec, bare, m_cfg)) return where + ": " + why->text;
      return std::nullopt;
    }
    if (node == nullptr) {
      return where + ": " + path + ": expected " + type_name(spec.type) + ", found '" +
             printable(text) + "' (not a TOML value); write e.g. --set " + path + "=" +
             example_value(spec);
    }
    if (auto why = assign(spec, *node, m_cfg)) {
      return why->whole ? where + ": " + why->text
                        : where + ": " + path + ": " + why->text + "; write e.g. --set " + path +
                              "=" + example_value(spec);
    }
    return std::nullopt;
  }

  void resolve_pending() {
    auto spec_of_path = [](const std::string& path) -> const KeySpec* {
      const auto dot = path.find('.');
      return dot == std::string::npos ? nullptr
                                      : find_spec(path.substr(0, dot), path.substr(dot + 1));
    };
    auto is_key = [&](const std::string& path) { return spec_of_path(path) != nullptr; };
    auto hint = [](const std::string& path) {
      const auto dot = path.find('.');
      if (dot == std::string::npos) return std::string();
      const std::string section = path.substr(0, dot);
      return is_section(section) ? unknown_key_hint(section, path.substr(dot + 1))
                                 : unknown_section_hint(section);
    };
    auto value_text = [&](const std::string& path) {
      const KeySpec& spec = *spec_of_path(path);
      if (spec.type == KeyType::kString) return field_of<std::string>(spec, m_cfg);
      if (spec.type == KeyType::kEnum)
        return std::string(spec.enum_ops->name_of(spec.field(m_cfg)));
      if ((spec.type == KeyType::kCountOrAuto && is_auto(field_of<CountOrAuto>(spec, m_cfg))) ||
          (spec.type == KeyType::kFloatOrAuto && is_auto(field_of<FloatOrAuto>(spec, m_cfg))))
        return std::string("auto");  // the word, not the TOML string "\"auto\""
      return format_value(spec, m_cfg);
    };
    auto assign_resolved = [&](const std::string& path, const std::string& text,
                               const std::string& where) {
      return assign_text(*spec_of_path(path), path, text, where);
    };
    for (auto& p : resolve(m_pending, is_key, hint, value_text, assign_resolved)) add(std::move(p));
    m_pending.clear();
  }

  Config m_cfg;
  std::vector<std::string> m_problems;
  std::map<std::string, std::string> m_origin;  // "section.key" -> "file:line" or "--set ..."
  std::map<std::string, Pending> m_pending;     // values with ${...}, resolved in finish()
  std::set<std::string> m_unread;               // keys whose value was refused
};

// A config file that says nothing (empty, or comments only): every key
// would silently take its default.
// A device reads as a file does (/dev/null says nothing); a FIFO is read
// once, by the loader.
bool says_nothing(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || std::filesystem::is_directory(status) || std::filesystem::is_fifo(status)) return false;
  bool too_big = false;
  const auto text = read_config_text(path, too_big);
  if (!text || too_big) return false;
  std::istringstream in(*text);
  for (std::string line; std::getline(in, line);) {
    const std::string t = trim(line);
    if (!t.empty() && t[0] != '#') return false;
  }
  return true;
}

}  // namespace

Config load(const std::string& path, const std::vector<std::string>& overrides) {
  if (says_nothing(path)) {
    throw UsageError(path +
                     ": the config file is empty (no key, no include): every key would take its "
                     "default, which is rarely the experiment meant. Give an experiment file "
                     "(e.g. configs/smoke.toml, or one that includes it), or check the path");
  }
  Loader loader;
  loader.read_file(path);
  for (const auto& o : overrides) loader.apply_override(o);
  return loader.finish();
}

Config parse(const std::string& toml_text, const std::string& origin,
             const std::vector<std::string>& overrides) {
  Loader loader;
  loader.read_text(toml_text, origin);
  for (const auto& o : overrides) loader.apply_override(o);
  return loader.finish();
}

}  // namespace syncopt::config
