// Checkpoint save, commit, load and housekeeping (see checkpoint.hpp for the
// layout and the crash-safety argument).
#include "checkpoint/checkpoint.hpp"

#include <zlib.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <nlohmann/json.hpp>
#include <system_error>

#include "common/atomic_file.hpp"
#include "common/error.hpp"

namespace syncopt::checkpoint {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr const char* kFormatName = "syncopt-checkpoint";
constexpr const char* kPartSuffix = ".state";

// What a user can do when the checkpoint to resume from is damaged.
std::string corrupt_advice(const fs::path& run_dir) {
  return "; resume from an older checkpoint (write its step number into '" +
         (checkpoints_dir(run_dir) / kLatestName).string() +
         "') or start a fresh run (run.resume = false)";
}

// Part names become file names: letters, digits, '_' and '-' only.
bool is_part_name(const std::string& part) {
  return !part.empty() && part.size() <= 128 && std::all_of(part.begin(), part.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
  });
}

void check_part_name(const std::string& part) {
  if (!is_part_name(part)) {
    throw InternalError("checkpoint part name '" + part +
                        "': expected 1 to 128 of [A-Za-z0-9_-] (it names a file)");
  }
}

std::string hex32(std::uint32_t v) {
  char buf[11];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

std::uint32_t crc32_of(std::string_view bytes) {
  return static_cast<std::uint32_t>(
      ::crc32_z(0L, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// A step directory's name as a number; nullopt for anything else, which
// housekeeping leaves alone (it is not ours).
std::optional<std::uint64_t> parse_step(std::string_view s) {
  std::uint64_t v = 0;
  if (s.empty() || s.size() > 20 || (s.size() > 1 && s[0] == '0')) return std::nullopt;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

bool exists_noexcept(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

[[noreturn]] void throw_fs_error(ExitCode code, const std::string& what, const fs::path& path,
                                 const std::error_code& ec) {
  throw OutputError(code, what + " '" + path.string() + "': " + ec.message() +
                              "; check that run.dir is writable and has free space");
}

// Creates <run_dir>/checkpoints/<step>/ and makes its entry durable: the
// parts and manifest inside are fsynced by write_file_atomic, but `latest`
// must not name a directory a power loss could lose.
fs::path make_step_dir(const fs::path& run_dir, std::uint64_t step) {
  const fs::path ckpt = checkpoints_dir(run_dir);
  const fs::path dir = step_dir(run_dir, step);
  std::error_code ec;
  const bool new_ckpt = !fs::is_directory(ckpt, ec);
  fs::create_directories(dir, ec);
  if (ec) throw_fs_error(ExitCode::kCantCreate, "cannot create checkpoint directory", dir, ec);
  fsync_dir(ckpt);
  if (new_ckpt) fsync_dir(run_dir);
  return dir;
}

// A directory's entries, with errors as OutputError rather than
// std::filesystem's untyped exceptions. Collected before anything is
// removed: removing while iterating leaves what the iterator sees unspecified.
std::vector<fs::directory_entry> list_dir(const fs::path& dir) {
  std::vector<fs::directory_entry> out;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    out.push_back(*it);
  }
  if (ec) throw_fs_error(ExitCode::kIoError, "cannot list", dir, ec);
  return out;
}

// Type tests that treat an entry gone or unreadable as "not that type".
bool is_dir(const fs::directory_entry& e) {
  std::error_code ec;
  return e.is_directory(ec);
}
bool is_file(const fs::directory_entry& e) {
  std::error_code ec;
  return e.is_regular_file(ec);
}

void remove_file(const fs::path& p) {
  std::error_code ec;
  fs::remove(p, ec);
  if (ec) throw_fs_error(ExitCode::kIoError, "cannot remove", p, ec);
}

// The manifest as JSON and back. Every field is checked by type so that a
// hand-edited or damaged manifest is a DataError, not a json exception.
std::string manifest_json(const Manifest& m) {
  json files = json::array();
  for (const auto& f : m.files) {
    files.push_back({{"part", f.part}, {"file", f.file}, {"nbytes", f.nbytes}, {"crc32", f.crc32}});
  }
  json j = {{"format", kFormatName},
            {"format_version", m.format_version},
            {"step", m.step},
            {"created_utc", m.created_utc},
            {"files", files}};
  if (!m.run.is_null()) j["run"] = m.run;
  return j.dump(2) + "\n";
}

Manifest parse_manifest(const std::string& text, const fs::path& path, std::uint64_t step,
                        const fs::path& run_dir) {
  const auto bad = [&](const std::string& what) {
    return DataError("checkpoint manifest '" + path.string() + "': " + what +
                     corrupt_advice(run_dir));
  };
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw bad(std::string("not valid JSON (") + e.what() + ")");
  }
  const auto field = [&](const json& obj, const char* key, json::value_t type) -> const json& {
    if (!obj.is_object() || !obj.contains(key)) throw bad(std::string("no \"") + key + "\"");
    const json& v = obj.at(key);
    // Unsigned fields may parse as either integer kind; both are fine if >= 0.
    const bool ok = v.type() == type || (type == json::value_t::number_unsigned &&
                                         v.is_number_integer() && v.get<std::int64_t>() >= 0);
    if (!ok) throw bad(std::string("\"") + key + "\" has the wrong type (" + v.type_name() + ")");
    return v;
  };
  Manifest m;
  if (field(j, "format", json::value_t::string).get<std::string>() != kFormatName) {
    throw bad(std::string("\"format\" is not \"") + kFormatName + "\"");
  }
  const auto version =
      field(j, "format_version", json::value_t::number_unsigned).get<std::uint64_t>();
  if (version != kFormatVersion) {
    throw bad("format version " + std::to_string(version) + ", this syncopt reads version " +
              std::to_string(kFormatVersion));
  }
  m.format_version = kFormatVersion;
  m.step = field(j, "step", json::value_t::number_unsigned).get<std::uint64_t>();
  if (m.step != step) {
    throw bad("step " + std::to_string(m.step) + " in a directory named " + std::to_string(step));
  }
  m.created_utc = field(j, "created_utc", json::value_t::string).get<std::string>();
  const json& files = field(j, "files", json::value_t::array);
  for (const json& f : files) {
    ManifestEntry e;
    e.part = field(f, "part", json::value_t::string).get<std::string>();
    e.file = field(f, "file", json::value_t::string).get<std::string>();
    e.nbytes = field(f, "nbytes", json::value_t::number_unsigned).get<std::uint64_t>();
    const auto crc = field(f, "crc32", json::value_t::number_unsigned).get<std::uint64_t>();
    // The file name is derived from the part name, never taken as a path:
    // a damaged manifest must not make us read outside the step directory.
    if (!is_part_name(e.part) || e.file != e.part + kPartSuffix || crc > 0xffffffffu) {
      throw bad("entry for part '" + e.part + "' is malformed (file '" + e.file + "')");
    }
    e.crc32 = static_cast<std::uint32_t>(crc);
    for (const auto& other : m.files) {
      if (other.part == e.part) throw bad("part '" + e.part + "' listed twice");
    }
    m.files.push_back(std::move(e));
  }
  if (j.contains("run")) m.run = field(j, "run", json::value_t::object);
  return m;
}

}  // namespace

fs::path checkpoints_dir(const fs::path& run_dir) { return run_dir / "checkpoints"; }

fs::path step_dir(const fs::path& run_dir, std::uint64_t step) {
  return checkpoints_dir(run_dir) / std::to_string(step);
}

std::optional<std::uint64_t> latest_step(const fs::path& run_dir) {
  const fs::path path = checkpoints_dir(run_dir) / kLatestName;
  if (!exists_noexcept(path)) return std::nullopt;
  std::string text = read_file_bytes(path);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  const auto step = parse_step(text);
  if (!step) {
    throw DataError("checkpoint pointer '" + path.string() + "' holds \"" + text.substr(0, 40) +
                    "\", expected a step number" + corrupt_advice(run_dir));
  }
  return step;
}

void write_part(const fs::path& run_dir, std::uint64_t step, const std::string& part,
                const State& state) {
  check_part_name(part);
  if (latest_step(run_dir) == step) {
    throw OutputError(ExitCode::kCantCreate,
                      "checkpoint step " + std::to_string(step) + " in '" +
                          checkpoints_dir(run_dir).string() +
                          "' is the committed one 'latest' names and is never rewritten; it "
                          "already holds this step (a save right after resuming needs none)");
  }
  const fs::path dir = make_step_dir(run_dir, step);
  // A manifest here is from a save killed before `latest` moved: remove it
  // (durably) before changing any part, so the directory is not taken as a
  // complete checkpoint while it holds parts of two saves.
  const fs::path manifest = dir / kManifestName;
  if (exists_noexcept(manifest)) {
    remove_file(manifest);
    fsync_dir(dir);
  }
  write_file_atomic(dir / (part + kPartSuffix), state.serialize());
}

Manifest commit(const fs::path& run_dir, std::uint64_t step, const std::vector<std::string>& parts,
                const json& run) {
  const fs::path dir = step_dir(run_dir, step);
  if (parts.empty())
    throw InternalError("checkpoint commit of step " + std::to_string(step) + " with no parts");
  Manifest m;
  m.step = step;
  m.created_utc = utc_now();
  m.run = run;
  for (const auto& part : parts) {
    check_part_name(part);
    for (const auto& e : m.files) {
      if (e.part == part) throw InternalError("checkpoint part '" + part + "' committed twice");
    }
    const fs::path file = dir / (part + kPartSuffix);
    // Read back rather than trusting what a rank says it wrote: the
    // checksum is of the bytes the file system holds.
    std::string bytes;
    try {
      bytes = read_file_bytes(file);
    } catch (const Error& e) {
      throw OutputError(ExitCode::kIoError, "cannot commit checkpoint step " +
                                                std::to_string(step) + ": part '" + part +
                                                "' was not written (" + e.what() +
                                                "); 'latest' still names the previous checkpoint");
    }
    m.files.push_back({part, part + kPartSuffix, bytes.size(), crc32_of(bytes)});
  }
  // Order matters: the manifest only after every part is durable, `latest`
  // only after the manifest is.
  write_file_atomic(dir / kManifestName, manifest_json(m));
  write_file_atomic(checkpoints_dir(run_dir) / kLatestName, std::to_string(step) + "\n");
  return m;
}

CheckpointWriter::CheckpointWriter(fs::path run_dir, std::uint64_t step)
    : m_run_dir(std::move(run_dir)), m_step(step) {}

void CheckpointWriter::add(const std::string& part, const State& state) {
  write_part(m_run_dir, m_step, part, state);
  m_parts.push_back(part);
}

Manifest CheckpointWriter::commit(const std::vector<std::string>& parts_of_other_ranks) {
  std::vector<std::string> all = m_parts;
  all.insert(all.end(), parts_of_other_ranks.begin(), parts_of_other_ranks.end());
  return checkpoint::commit(m_run_dir, m_step, all, m_run);
}

bool Checkpoint::has_part(std::string_view name) const {
  return std::any_of(parts.begin(), parts.end(), [&](const auto& p) { return p.first == name; });
}

const State& Checkpoint::part(std::string_view name) const {
  for (const auto& p : parts)
    if (p.first == name) return p.second;
  std::string have;
  for (const auto& e : manifest.files) have += (have.empty() ? "" : ", ") + e.part;
  throw DataError("checkpoint '" + dir.string() + "' has no part '" + std::string(name) +
                  "' loaded (its manifest lists: " + have +
                  "); was it written by a run with another cluster layout?");
}

Manifest read_manifest(const fs::path& run_dir, std::uint64_t step) {
  const fs::path path = step_dir(run_dir, step) / kManifestName;
  if (!exists_noexcept(path)) {
    throw DataError("checkpoint step " + std::to_string(step) + ": manifest '" + path.string() +
                    "' is missing (the save never finished)" + corrupt_advice(run_dir));
  }
  return parse_manifest(read_file_bytes(path), path, step, run_dir);
}

Checkpoint load_step(const fs::path& run_dir, std::uint64_t step,
                     const std::vector<std::string>& only) {
  Checkpoint c;
  c.step = step;
  c.dir = step_dir(run_dir, step);
  const fs::path manifest_path = c.dir / kManifestName;
  if (!exists_noexcept(manifest_path)) {
    throw DataError("checkpoint step " + std::to_string(step) + ": manifest '" +
                    manifest_path.string() + "' is missing (the save never finished)" +
                    corrupt_advice(run_dir));
  }
  c.manifest = parse_manifest(read_file_bytes(manifest_path), manifest_path, step, run_dir);

  const auto wanted = [&](const std::string& part) {
    return only.empty() || std::find(only.begin(), only.end(), part) != only.end();
  };
  for (const auto& name : only) {
    const bool listed = std::any_of(c.manifest.files.begin(), c.manifest.files.end(),
                                    [&](const ManifestEntry& e) { return e.part == name; });
    if (!listed) {
      std::string have;
      for (const auto& e : c.manifest.files) have += (have.empty() ? "" : ", ") + e.part;
      throw DataError("checkpoint manifest '" + manifest_path.string() + "' has no part '" + name +
                      "' (it lists: " + have +
                      "); was it written by a run with another cluster layout?");
    }
  }
  // Sizes of every file first (cheap, and a missing part is found even by a
  // rank that loads another), then checksums of the parts loaded.
  for (const auto& e : c.manifest.files) {
    const fs::path file = c.dir / e.file;
    std::error_code ec;
    const auto size = fs::file_size(file, ec);
    if (ec) {
      throw DataError("checkpoint part '" + file.string() +
                      "' listed in the manifest is missing (" + ec.message() + ")" +
                      corrupt_advice(run_dir));
    }
    if (size != e.nbytes) {
      throw DataError("checkpoint part '" + file.string() + "': size mismatch: expected " +
                      std::to_string(e.nbytes) + " bytes (manifest), found " +
                      std::to_string(size) + corrupt_advice(run_dir));
    }
  }
  for (const auto& e : c.manifest.files) {
    if (!wanted(e.part)) continue;
    const fs::path file = c.dir / e.file;
    const std::string bytes = read_file_bytes(file);
    const std::uint32_t crc = crc32_of(bytes);
    if (bytes.size() != e.nbytes || crc != e.crc32) {
      throw DataError("checkpoint part '" + file.string() +
                      "': checksum mismatch: expected crc32 " + hex32(e.crc32) +
                      " (manifest), found " + hex32(crc) + " over " + std::to_string(bytes.size()) +
                      " bytes" + corrupt_advice(run_dir));
    }
    c.parts.emplace_back(e.part, State::deserialize(bytes, file.string(), e.part));
  }
  return c;
}

namespace {

// Without `latest`: "3 of them, steps 100, 200 and 300; the newest that
// verifies is step 300", or nullopt when no committed checkpoint verifies.
std::optional<std::string> newest_verified(const fs::path& run_dir) {
  std::vector<std::uint64_t> steps;
  try {
    steps = committed_steps(run_dir);
  } catch (const Error&) {
    return std::nullopt;
  }
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    try {
      (void)load_step(run_dir, *it);  // sizes and CRC-32s of every part
    } catch (const Error&) {
      continue;
    }
    std::string list;
    for (std::size_t i = 0; i < steps.size(); ++i) {
      list += (i == 0 ? "" : i + 1 == steps.size() ? " and " : ", ") + std::to_string(steps[i]);
    }
    return std::to_string(steps.size()) +
           (steps.size() == 1 ? " of them, step " : " of them, steps ") + list +
           "; the newest that verifies is step " + std::to_string(*it);
  }
  return std::nullopt;
}

}  // namespace

Checkpoint load_latest(const fs::path& run_dir, const std::vector<std::string>& only) {
  const auto step = latest_step(run_dir);
  if (!step) {
    const fs::path latest = checkpoints_dir(run_dir) / kLatestName;
    if (const auto verified = newest_verified(run_dir)) {
      throw MissingInputError(
          "'" + latest.string() + "' does not exist, but committed checkpoints do (" + *verified +
          "): to resume from it, point 'latest' at it (printf '" +
          verified->substr(verified->rfind(' ') + 1) + "\\n' > " + latest.string() +
          ") and resume again; syncopt checkpoints " + run_dir.string() + " lists them");
    }
    const std::string why = exists_noexcept(run_dir)
                                ? "'" + latest.string() + "' does not exist (no save was committed)"
                                : "the run directory '" + run_dir.string() + "' does not exist";
    throw MissingInputError("nothing to resume: " + why +
                            "; check run.dir and run.name, or start a fresh run with "
                            "run.resume = false");
  }
  if (!exists_noexcept(step_dir(run_dir, *step))) {
    throw DataError("checkpoint pointer '" + (checkpoints_dir(run_dir) / kLatestName).string() +
                    "' names step " + std::to_string(*step) + ", but '" +
                    step_dir(run_dir, *step).string() + "' does not exist" +
                    corrupt_advice(run_dir));
  }
  return load_step(run_dir, *step, only);
}

std::vector<std::uint64_t> committed_steps(const fs::path& run_dir) {
  std::vector<std::uint64_t> steps;
  std::error_code ec;
  const fs::path ckpt = checkpoints_dir(run_dir);
  if (!fs::is_directory(ckpt, ec)) return steps;
  for (const auto& entry : list_dir(ckpt)) {
    const auto step = parse_step(entry.path().filename().string());
    if (step && is_dir(entry) && exists_noexcept(entry.path() / kManifestName)) {
      steps.push_back(*step);
    }
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::vector<fs::path> remove_stale_temporaries(const fs::path& run_dir) {
  std::vector<fs::path> removed;
  const fs::path ckpt = checkpoints_dir(run_dir);
  std::error_code ec;
  if (!fs::is_directory(ckpt, ec)) return removed;
  std::optional<std::uint64_t> latest;
  try {
    latest = latest_step(run_dir);
  } catch (const DataError&) {
    // Which step is the committed one cannot be told: nothing is removed,
    // and the resume refuses the pointer (65) once run.json records it.
    return removed;
  }
  std::vector<fs::path> files, dirs;
  for (const auto& entry : list_dir(ckpt)) {
    const fs::path& p = entry.path();
    if (is_file(entry) && is_atomic_temporary(p)) {
      files.push_back(p);
      continue;
    }
    const auto step = parse_step(p.filename().string());
    if (!step || !is_dir(entry)) continue;
    if (!exists_noexcept(p / kManifestName) && step != latest) {
      dirs.push_back(p);
      continue;
    }
    for (const auto& inner : list_dir(p)) {
      if (is_file(inner) && is_atomic_temporary(inner.path())) files.push_back(inner.path());
    }
  }
  for (const auto& f : files) remove_file(f);
  for (const auto& d : dirs) {
    fs::remove_all(d, ec);
    if (ec) throw_fs_error(ExitCode::kIoError, "cannot remove", d, ec);
  }
  removed.insert(removed.end(), files.begin(), files.end());
  removed.insert(removed.end(), dirs.begin(), dirs.end());
  return removed;
}

std::vector<std::uint64_t> prune(const fs::path& run_dir, std::size_t keep) {
  const auto latest = latest_step(run_dir);
  const auto steps = committed_steps(run_dir);
  std::vector<std::uint64_t> removed;
  const std::size_t n = steps.size();
  for (std::size_t i = 0; i + keep < n; ++i) {  // all but the newest `keep`
    if (steps[i] == latest) continue;
    const fs::path dir = step_dir(run_dir, steps[i]);
    // Uncommit first, so a kill midway leaves a manifest-less directory
    // (cleared by remove_stale_temporaries), never a listed but partial one.
    remove_file(dir / kManifestName);
    fsync_dir(dir);
    std::error_code ec;
    fs::remove_all(dir, ec);
    if (ec) throw_fs_error(ExitCode::kIoError, "cannot remove", dir, ec);
    removed.push_back(steps[i]);
  }
  return removed;
}

}  // namespace syncopt::checkpoint
