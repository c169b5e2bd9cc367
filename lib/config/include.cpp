// Config includes (see include.hpp).
#include "config/include.hpp"

#include <toml++/toml.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace syncopt::config {

namespace fs = std::filesystem;

namespace {

constexpr int kMaxDepth = 16;  // a chain deeper than this is surely a mistake

struct Resolver {
  std::vector<std::string>& problems;
  std::vector<ConfigFile> files;
  std::vector<std::string> chain;  // the files being read, outermost first

  std::string chain_text() const {
    std::string out;
    for (const auto& c : chain) out += (out.empty() ? "" : " -> ") + c;
    return out;
  }

  // Reads `path` and, before it, what it includes. `where` names the
  // include line that asked for it ("" for the top file).
  void visit(const std::string& path, const std::string& where) {
    const fs::path canon = fs::weakly_canonical(path);
    for (const auto& c : chain) {
      if (fs::weakly_canonical(c) == canon) {
        problems.push_back(where + "include cycle: " + chain_text() + " -> " + path +
                           "; remove one of the includes");
        return;
      }
    }
    if (static_cast<int>(chain.size()) >= kMaxDepth) {
      problems.push_back(where + "includes nested more than " + std::to_string(kMaxDepth) +
                         " deep: " + chain_text());
      return;
    }
    bool too_big = false;
    const auto text = read_config_text(path, too_big);
    if (!chain.empty() && (!text || fs::is_directory(path))) {
      problems.push_back(where + "included config file '" + path +
                         "' not found (relative paths start at the including file's folder)");
      return;
    }
    if (too_big) {
      problems.push_back(where + "'" + path + "' holds more than " +
                         std::to_string(kMaxConfigBytes >> 20) +
                         " MiB: not a config file (a device such as /dev/zero, or data?); give "
                         "the path of a .toml file");
      return;
    }
    ConfigFile file{path, text.value_or("")};
    chain.push_back(path);
    try {
      const toml::table doc = toml::parse(std::string_view(file.text), std::string_view(path));
      if (const toml::node* inc = doc.get("include")) {
        const auto begin = inc->source().begin.line, end = inc->source().end.line;
        const std::string at = path + ":" + std::to_string(begin) + ": ";
        std::vector<std::string> names;
        if (const auto s = inc->value_exact<std::string>()) {
          names.push_back(*s);
        } else if (const auto* list = inc->as_array();
                   list && list->is_homogeneous<std::string>()) {
          for (const auto& n : *list) names.push_back(*n.value_exact<std::string>());
        } else {
          problems.push_back(at +
                             "include: expected a file name or a list of them, e.g. "
                             "include = \"base.toml\"");
        }
        blank_lines(file.text, begin, end);
        const fs::path folder = fs::path(path).parent_path();
        for (const auto& name : names) {
          const fs::path p = fs::path(name).is_absolute() ? fs::path(name) : folder / name;
          visit(p.lexically_normal().string(), at);
        }
      }
    } catch (const toml::parse_error&) {
      // Not TOML: the loader reads it and reports where.
    }
    chain.pop_back();
    files.push_back(std::move(file));
  }

  // Lines begin..end (1-based) emptied, so the loader never sees the
  // include key and every other line keeps its number.
  static void blank_lines(std::string& text, std::size_t begin, std::size_t end) {
    std::string out;
    std::istringstream in(text);
    std::size_t n = 0;
    for (std::string line; std::getline(in, line);) {
      ++n;
      if (n < begin || n > end) out += line;
      out += '\n';
    }
    text = out;
  }
};

}  // namespace

std::optional<std::string> read_config_text(const std::string& path, bool& too_big) {
  too_big = false;
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text;
  char chunk[65536];
  while (in.read(chunk, sizeof(chunk)) || in.gcount() > 0) {
    text.append(chunk, static_cast<std::size_t>(in.gcount()));
    if (text.size() > kMaxConfigBytes) {
      too_big = true;
      text.resize(kMaxConfigBytes);
      break;
    }
  }
  return text;
}

std::vector<ConfigFile> resolve_includes(const std::string& path,
                                         std::vector<std::string>& problems) {
  Resolver r{problems, {}, {}};
  r.visit(path, "");
  return r.files;
}

std::vector<std::string> config_files(const std::string& path) {
  std::vector<std::string> problems, out;
  try {
    for (const auto& f : resolve_includes(path, problems)) out.push_back(f.path);
  } catch (const std::exception&) {
    out = {path};
  }
  return out;
}

}  // namespace syncopt::config
