// checkpoint::State: fields, typed access with path-naming errors, and the
// little-endian binary encoding described in state.hpp.
#include "checkpoint/state.hpp"

#include <bit>
#include <cstring>
#include <type_traits>
#include <variant>

#include "common/error.hpp"

namespace syncopt::checkpoint {

namespace {

constexpr char kMagic[8] = {'S', 'Y', 'N', 'C', 'S', 'T', 'A', 'T'};
// Deeper nesting than any component needs; bounds the recursion of
// deserialize on a damaged or hostile file.
constexpr int kMaxDepth = 32;

std::string join(const std::string& path, std::string_view name) {
  return path.empty() ? std::string(name) : path + "." + std::string(name);
}

// Type names for messages, in the order of Value's alternatives.
constexpr const char* kKindNames[] = {"u64",         "i64",       "f64",       "string",
                                      "float array", "u64 array", "i64 array", "child state"};

// Index of T among Value's alternatives (and in kKindNames).
template <class T>
constexpr std::size_t kind_index() {
  if constexpr (std::is_same_v<T, std::uint64_t>) return 0;
  if constexpr (std::is_same_v<T, std::int64_t>) return 1;
  if constexpr (std::is_same_v<T, double>) return 2;
  if constexpr (std::is_same_v<T, std::string>) return 3;
  if constexpr (std::is_same_v<T, std::vector<float>>) return 4;
  if constexpr (std::is_same_v<T, std::vector<std::uint64_t>>) return 5;
  if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) return 6;
  return 7;
}

void put_u8(std::string& out, std::uint8_t v) { out.push_back(static_cast<char>(v)); }
void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u64(std::string& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Bounds-checked little-endian reader over the serialized bytes.
class Reader {
 public:
  Reader(std::string_view bytes, const std::string& origin) : m_bytes(bytes), m_origin(origin) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw DataError("checkpoint state '" + m_origin + "': " + what + " at byte " +
                    std::to_string(m_pos) +
                    "; the file is damaged or not a syncopt checkpoint state: resume from an "
                    "older checkpoint or start a fresh run (run.resume = false)");
  }
  void need(std::uint64_t n, const std::string& what) const {
    const std::uint64_t left = m_bytes.size() - m_pos;
    if (n > left) {
      fail("truncated: " + what + " needs " + std::to_string(n) + " bytes, only " +
           std::to_string(left) + " left");
    }
  }
  std::string_view take(std::uint64_t n, const std::string& what) {
    need(n, what);
    const auto out = m_bytes.substr(m_pos, static_cast<std::size_t>(n));
    m_pos += static_cast<std::size_t>(n);
    return out;
  }
  std::uint8_t u8(const std::string& what) { return static_cast<std::uint8_t>(take(1, what)[0]); }
  std::uint32_t u32(const std::string& what) {
    const auto b = take(4, what);
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= std::uint32_t{static_cast<std::uint8_t>(b[i])} << (8 * i);
    return v;
  }
  std::uint64_t u64(const std::string& what) {
    const auto b = take(8, what);
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= std::uint64_t{static_cast<std::uint8_t>(b[i])} << (8 * i);
    return v;
  }
  // A count of `elem`-byte items; checked against what is left before
  // anything is allocated, so a damaged count cannot ask for terabytes.
  std::uint64_t count(std::uint64_t elem, const std::string& what) {
    const std::uint64_t n = u64(what + " length");
    const std::uint64_t left = m_bytes.size() - m_pos;
    if (elem > 0 && n > left / elem) {
      fail("truncated: " + what + " claims " + std::to_string(n) + " items of " +
           std::to_string(elem) + " bytes, only " + std::to_string(left) + " bytes left");
    }
    return n;
  }
  bool done() const { return m_pos == m_bytes.size(); }
  std::size_t pos() const { return m_pos; }

 private:
  std::string_view m_bytes;
  const std::string& m_origin;
  std::size_t m_pos = 0;
};

}  // namespace

struct State::Field {
  // The alternatives' order is the encoding's kind byte minus one; append only.
  using Value = std::variant<std::uint64_t, std::int64_t, double, std::string, std::vector<float>,
                             std::vector<std::uint64_t>, std::vector<std::int64_t>, State>;
  static_assert(std::is_same_v<std::variant_alternative_t<kind_index<std::vector<float>>(), Value>,
                               std::vector<float>> &&
                std::is_same_v<std::variant_alternative_t<kind_index<State>(), Value>, State>);
  std::string name;
  Value value;
};

State::State(std::string path) : m_path(std::move(path)) {}
State::State(const State&) = default;
State::State(State&&) noexcept = default;
State& State::operator=(const State&) = default;
State& State::operator=(State&&) noexcept = default;
State::~State() = default;

std::size_t State::size() const { return m_fields.size(); }

bool State::has(std::string_view name) const {
  for (const auto& f : m_fields)
    if (f.name == name) return true;
  return false;
}

std::vector<std::string> State::names() const {
  std::vector<std::string> out;
  out.reserve(m_fields.size());
  for (const auto& f : m_fields) out.push_back(f.name);
  return out;
}

std::string State::field_error(std::string_view name, std::string_view what) const {
  std::string msg = "checkpoint field " + join(m_path, name) + ": " + std::string(what);
  if (!m_origin.empty()) msg += " (in '" + m_origin + "')";
  return msg;
}

void State::add(Field field) {
  if (field.name.empty() || field.name.find('.') != std::string::npos) {
    throw InternalError("checkpoint field name '" + field.name + "' under '" + m_path +
                        "': names must be non-empty and contain no '.'");
  }
  if (has(field.name)) {
    throw InternalError("checkpoint field " + join(m_path, field.name) + " was put twice");
  }
  m_fields.push_back(std::move(field));
}

template <StateValue T>
void State::put(std::string name, T value) {
  add(Field{std::move(name), std::move(value)});
}

void State::put_child(std::string name, State child) {
  child.set_path(join(m_path, name), m_origin);
  add(Field{std::move(name), std::move(child)});
}

void State::set_path(const std::string& path, const std::string& origin) {
  m_path = path;
  m_origin = origin;
  for (auto& f : m_fields) {
    if (auto* c = std::get_if<State>(&f.value)) c->set_path(join(m_path, f.name), origin);
  }
}

const State::Field& State::find(std::string_view name, std::size_t kind) const {
  for (const auto& f : m_fields) {
    if (f.name != name) continue;
    if (f.value.index() != kind) {
      throw DataError(field_error(name, std::string("expected a ") + kKindNames[kind] +
                                            ", found a " + kKindNames[f.value.index()]));
    }
    return f;
  }
  throw DataError(field_error(name, "missing"));
}

std::string State::kind_of(std::string_view name) const {
  for (const auto& f : m_fields) {
    if (f.name == name) return kKindNames[f.value.index()];
  }
  throw DataError(field_error(name, "missing"));
}

template <StateValue T>
const T& State::get(std::string_view name) const {
  return std::get<T>(find(name, kind_index<T>()).value);
}

const State& State::child(std::string_view name) const {
  return std::get<State>(find(name, kind_index<State>()).value);
}

template void State::put(std::string, std::uint64_t);
template void State::put(std::string, std::int64_t);
template void State::put(std::string, double);
template void State::put(std::string, std::string);
template void State::put(std::string, std::vector<float>);
template void State::put(std::string, std::vector<std::uint64_t>);
template void State::put(std::string, std::vector<std::int64_t>);
template const std::uint64_t& State::get(std::string_view) const;
template const std::int64_t& State::get(std::string_view) const;
template const double& State::get(std::string_view) const;
template const std::string& State::get(std::string_view) const;
template const std::vector<float>& State::get(std::string_view) const;
template const std::vector<std::uint64_t>& State::get(std::string_view) const;
template const std::vector<std::int64_t>& State::get(std::string_view) const;

bool operator==(const State& a, const State& b) {
  if (a.m_fields.size() != b.m_fields.size()) return false;
  for (std::size_t i = 0; i < a.m_fields.size(); ++i) {
    const auto& x = a.m_fields[i];
    const auto& y = b.m_fields[i];
    if (x.name != y.name || x.value.index() != y.value.index()) return false;
    // Floats bitwise: a NaN in a buffer still equals itself, and -0 != +0,
    // which is what "the same state" means for a restart.
    if (const auto* fx = std::get_if<std::vector<float>>(&x.value)) {
      const auto& fy = std::get<std::vector<float>>(y.value);
      if (fx->size() != fy.size() ||
          (!fx->empty() && std::memcmp(fx->data(), fy.data(), fx->size() * sizeof(float)) != 0))
        return false;
    } else if (const auto* dx = std::get_if<double>(&x.value)) {
      if (std::bit_cast<std::uint64_t>(*dx) !=
          std::bit_cast<std::uint64_t>(std::get<double>(y.value)))
        return false;
    } else if (x.value != y.value) {
      return false;
    }
  }
  return true;
}

namespace {

template <class T>
void encode_array(const std::vector<T>& v, std::string& out) {
  put_u64(out, v.size());
  for (const T x : v) {
    if constexpr (std::is_same_v<T, float>) {
      put_u32(out, std::bit_cast<std::uint32_t>(x));
    } else {
      put_u64(out, static_cast<std::uint64_t>(x));
    }
  }
}

}  // namespace

std::string State::serialize() const {
  std::string out(kMagic, sizeof kMagic);
  put_u32(out, kFormatVersion);
  // A lambda with explicit recursion keeps Field private to State.
  const auto node = [](const State& s, std::string& o, const auto& self) -> void {
    put_u64(o, s.m_fields.size());
    for (const auto& f : s.m_fields) {
      put_u8(o, static_cast<std::uint8_t>(f.value.index() + 1));
      put_u32(o, static_cast<std::uint32_t>(f.name.size()));
      o += f.name;
      std::visit(
          [&](const auto& v) {
            using T = std::decay_t<decltype(v)>;
            if constexpr (std::is_same_v<T, std::uint64_t>) {
              put_u64(o, v);
            } else if constexpr (std::is_same_v<T, std::int64_t>) {
              put_u64(o, static_cast<std::uint64_t>(v));
            } else if constexpr (std::is_same_v<T, double>) {
              put_u64(o, std::bit_cast<std::uint64_t>(v));
            } else if constexpr (std::is_same_v<T, std::string>) {
              put_u64(o, v.size());
              o += v;
            } else if constexpr (std::is_same_v<T, State>) {
              self(v, o, self);
            } else {
              encode_array(v, o);
            }
          },
          f.value);
    }
  };
  node(*this, out, node);
  return out;
}

State State::deserialize(std::string_view bytes, const std::string& origin,
                         const std::string& path) {
  Reader in(bytes, origin);
  if (bytes.size() < sizeof kMagic || std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) {
    in.fail("wrong magic: expected \"SYNCSTAT\"");
  }
  in.take(sizeof kMagic, "magic");
  const std::uint32_t version = in.u32("format version");
  if (version != kFormatVersion) {
    in.fail("format version " + std::to_string(version) + ", this syncopt reads version " +
            std::to_string(kFormatVersion));
  }
  const auto node = [&in](State& s, int depth, const auto& self) -> void {
    if (depth > kMaxDepth) in.fail("children nested deeper than " + std::to_string(kMaxDepth));
    // Each field takes at least 13 bytes (kind, name length, one u64 or a
    // child's count), which bounds a damaged count.
    const std::uint64_t n = in.count(13, "field count of '" + s.m_path + "'");
    for (std::uint64_t i = 0; i < n; ++i) {
      const std::size_t at = in.pos();
      const std::uint8_t kind = in.u8("field kind");
      const auto name_len = in.u32("field name length");
      std::string name(in.take(name_len, "field name"));
      const std::string where = "field " + join(s.m_path, name);
      Field f{name, std::uint64_t{0}};
      switch (kind) {
        case 1:
          f.value = in.u64(where);
          break;
        case 2:
          f.value = static_cast<std::int64_t>(in.u64(where));
          break;
        case 3:
          f.value = std::bit_cast<double>(in.u64(where));
          break;
        case 4:
          f.value = std::string(in.take(in.count(1, where), where));
          break;
        case 5: {
          std::vector<float> v(static_cast<std::size_t>(in.count(4, where)));
          for (auto& x : v) x = std::bit_cast<float>(in.u32(where));
          f.value = std::move(v);
          break;
        }
        case 6: {
          std::vector<std::uint64_t> v(static_cast<std::size_t>(in.count(8, where)));
          for (auto& x : v) x = in.u64(where);
          f.value = std::move(v);
          break;
        }
        case 7: {
          std::vector<std::int64_t> v(static_cast<std::size_t>(in.count(8, where)));
          for (auto& x : v) x = static_cast<std::int64_t>(in.u64(where));
          f.value = std::move(v);
          break;
        }
        case 8: {
          State c(join(s.m_path, name));
          c.m_origin = s.m_origin;
          self(c, depth + 1, self);
          f.value = std::move(c);
          break;
        }
        default:
          in.fail(where + ": unknown kind " + std::to_string(kind) + " (field starts at byte " +
                  std::to_string(at) + ")");
      }
      if (name.empty() || name.find('.') != std::string::npos) {
        in.fail(where + ": invalid field name");
      }
      if (s.has(name)) in.fail(where + ": duplicate field name");
      s.m_fields.push_back(std::move(f));
    }
  };
  State root(path);
  root.m_origin = origin;
  node(root, 0, node);
  if (!in.done()) {
    in.fail(std::to_string(bytes.size() - in.pos()) + " trailing bytes after the last field");
  }
  return root;
}

}  // namespace syncopt::checkpoint
