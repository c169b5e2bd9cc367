// ${section.key} and ${env:VAR} in config values (see interpolate.hpp).
#include "config/interpolate.hpp"

#include <cstdlib>
#include <set>

#include "config/text.hpp"

namespace syncopt::config::detail {
namespace {

class Resolver {
 public:
  Resolver(const std::map<std::string, Pending>& pending,
           const std::function<bool(const std::string&)>& is_key,
           const std::function<std::string(const std::string&)>& hint,
           const std::function<std::string(const std::string&)>& value_text,
           const std::function<std::optional<std::string>(const std::string&, const std::string&,
                                                          const std::string&)>& assign)
      : m_pending(pending),
        m_is_key(is_key),
        m_hint(hint),
        m_value_text(value_text),
        m_assign(assign) {}

  // True when `path` holds its final value (resolved now, before, or never
  // pending); false when it, or a key it refers to, failed.
  bool visit(const std::string& path) {
    const auto it = m_pending.find(path);
    if (it == m_pending.end() || m_done.count(path) != 0) return true;
    if (m_failed.count(path) != 0) return false;
    const Pending& p = it->second;
    if (m_active.count(path) != 0) {
      fail(path, p.where + ": " + path + " = \"" + printable(p.text) +
                     "\": the references go round in a circle back to " + path);
      return false;
    }
    m_active.insert(path);
    std::string out;
    const bool ok = substitute(path, p, out);
    m_active.erase(path);
    if (!ok) {
      m_failed.insert(path);
      return false;
    }
    if (auto why = m_assign(path, out, p.where)) {
      fail(path, *why + " (" + path + " = \"" + printable(p.text) + "\" resolved to \"" +
                     printable(out) + "\")");
      return false;
    }
    m_done.insert(path);
    return true;
  }

  std::vector<std::string> problems;

 private:
  void fail(const std::string& path, std::string problem) {
    m_failed.insert(path);
    problems.push_back(std::move(problem));
  }

  bool substitute(const std::string& path, const Pending& p, std::string& out) {
    const std::string& t = p.text;
    const std::string at = p.where + ": " + path + " = \"" + printable(t) + "\": ";
    bool ok = true;
    for (std::size_t i = 0; i < t.size();) {
      const std::size_t open = t.find("${", i);
      if (open == std::string::npos) {
        out += t.substr(i);
        break;
      }
      out += t.substr(i, open - i);
      const std::size_t close = t.find('}', open + 2);
      if (close == std::string::npos) {
        fail(path, at + "'${' without its '}'; write ${section.key} or ${env:VAR}");
        return false;
      }
      const std::string ref = trim(std::string_view(t).substr(open + 2, close - open - 2));
      i = close + 1;
      if (ref.rfind("env:", 0) == 0) {
        std::string var = ref.substr(4), fallback;
        const std::size_t comma = var.find(',');
        if (comma != std::string::npos) {
          fallback = var.substr(comma + 1);
          var = var.substr(0, comma);
        }
        if (const char* v = std::getenv(var.c_str()); v != nullptr) {
          out += v;
        } else if (comma != std::string::npos) {
          out += fallback;
        } else {
          fail(path, at + "${env:" + var + "}: the environment variable " + var +
                         " is not set; export it, or give a default: ${env:" + var + ",value}");
          ok = false;
        }
      } else if (!m_is_key(ref)) {
        fail(path, at + "${" + ref + "}: no key " + ref + m_hint(ref) +
                       " (write ${section.key}, e.g. ${run.seed}, or ${env:VAR})");
        ok = false;
      } else if (visit(ref)) {
        out += m_value_text(ref);
      } else {
        ok = false;  // its own problem is reported where it fails
      }
    }
    return ok;
  }

  const std::map<std::string, Pending>& m_pending;
  const std::function<bool(const std::string&)>& m_is_key;
  const std::function<std::string(const std::string&)>& m_hint;
  const std::function<std::string(const std::string&)>& m_value_text;
  const std::function<std::optional<std::string>(const std::string&, const std::string&,
                                                 const std::string&)>& m_assign;
  std::set<std::string> m_done, m_failed, m_active;
};

}  // namespace

std::vector<std::string> resolve(
    const std::map<std::string, Pending>& pending,
    const std::function<bool(const std::string&)>& is_key,
    const std::function<std::string(const std::string&)>& hint,
    const std::function<std::string(const std::string&)>& value_text,
    const std::function<std::optional<std::string>(const std::string&, const std::string&,
                                                   const std::string&)>& assign) {
  Resolver r(pending, is_key, hint, value_text, assign);
  for (const auto& [path, p] : pending) r.visit(path);
  return std::move(r.problems);
}

}  // namespace syncopt::config::detail
