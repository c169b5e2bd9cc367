// checkpoint::State: the training state a component hands over to a
// checkpoint (an optimiser's buffers, a sampler's position, an RNG), as an
// ordered bag of named, typed fields and nested States, with a deterministic
// binary encoding. Components build one in state() and read one in
// restore(); the checkpoint files (checkpoint.hpp) are serialized States.
//
// Encoding (all integers little-endian, so a file moves between machines):
//   file   = magic "SYNCSTAT" (8 bytes), u32 format version, node
//   node   = u64 field count, field*
//   field  = u8 kind (1 u64, 2 i64, 3 f64, 4 string, 5 float array,
//            6 u64 array, 7 i64 array, 8 child), u32 name length, name, value
//   value  = u64 | i64 | f64 (IEEE bits as u64) | u64 length + bytes (string)
//          | u64 count + count * 4 or 8 bytes (float, u64, i64 vectors)
//          | node (child)
// The same puts in the same order give the same bytes.
#pragma once

#include <concepts>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace syncopt::checkpoint {

// The value types a field can hold (a child State is put with put_child).
template <class T>
concept StateValue =
    std::same_as<T, std::uint64_t> || std::same_as<T, std::int64_t> || std::same_as<T, double> ||
    std::same_as<T, std::string> || std::same_as<T, std::vector<float>> ||
    std::same_as<T, std::vector<std::uint64_t>> || std::same_as<T, std::vector<std::int64_t>>;

class State {
 public:
  static constexpr std::uint32_t kFormatVersion = 1;

  // `path` is this State's place in the tree ("shard0.optim"), used in error
  // messages; put_child and deserialize set it for the States they hold.
  explicit State(std::string path = "");
  State(const State&);
  State(State&&) noexcept;
  State& operator=(const State&);
  State& operator=(State&&) noexcept;
  ~State();

  // Adds a field. Names are non-empty and contain no '.'; putting the same
  // name twice is a bug (InternalError). The value types are exact (an int
  // literal is ambiguous on purpose: say which integer you mean).
  template <StateValue T>
  void put(std::string name, T value);
  void put(std::string name, const char* value) { put(std::move(name), std::string(value)); }
  void put_child(std::string name, State child);

  // Reads a field. A missing field or another type is a DataError naming the
  // field path and the origin, e.g. "checkpoint field shard0.optim.mom:
  // missing (in 'runs/a/checkpoints/100/shard0.state')".
  template <StateValue T>
  const T& get(std::string_view name) const;
  const State& child(std::string_view name) const;

  bool has(std::string_view name) const;
  // The kind of field `name`: "u64", "i64", "f64", "string", "float array",
  // "u64 array", "i64 array" or "child state" (DataError if missing).
  std::string kind_of(std::string_view name) const;
  std::vector<std::string> names() const;  // in insertion order
  std::size_t size() const;
  const std::string& path() const { return m_path; }
  const std::string& origin() const { return m_origin; }

  // A DataError about field `name` of this State ("checkpoint field
  // <path>.<name>: <what> (in '<origin>')"), for restore() checks that go
  // beyond types, e.g. a buffer whose length does not match.
  [[nodiscard]] std::string field_error(std::string_view name, std::string_view what) const;

  std::string serialize() const;
  // Malformed bytes (magic, version, truncation, unknown kind, trailing
  // bytes, duplicate names) are a DataError naming `origin` (a file path)
  // and the byte offset. `path` names the root in field errors.
  static State deserialize(std::string_view bytes, const std::string& origin,
                           const std::string& path = "");

  // Same fields, same order, same values (floats compared bitwise).
  friend bool operator==(const State& a, const State& b);

 private:
  struct Field;  // a name and a value of one of the kinds; in state.cpp
  const Field& find(std::string_view name, std::size_t kind) const;
  void add(Field field);
  void set_path(const std::string& path, const std::string& origin);

  std::string m_path;
  std::string m_origin;  // file the State was read from; empty if built in memory
  std::vector<Field> m_fields;
};

}  // namespace syncopt::checkpoint
