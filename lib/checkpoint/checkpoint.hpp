// The on-disk checkpoint format (docs/design.md §10): saving the parts of a
// training step, committing them with a manifest and the `latest` pointer,
// loading and verifying the latest checkpoint, and housekeeping.
//
//   <run_dir>/checkpoints/<step>/<part>.state   one serialized State per part
//   <run_dir>/checkpoints/<step>/MANIFEST.json  written after every part
//   <run_dir>/checkpoints/latest                "<step>\n", renamed into place last
//
// Every file is written by write_file_atomic (temporary name, fsync, rename,
// fsync of the directory), in that order, so a process killed at any moment
// of a save leaves `latest` naming a complete, checksummed checkpoint (the
// previous one) or none at all. A step directory is committed once it has a
// manifest; the one `latest` names is never modified or removed.
//
// Several ranks may save into one step: each calls write_part for its own
// parts, then (after a barrier) one rank calls commit with every part name.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "checkpoint/state.hpp"

namespace syncopt::checkpoint {

inline constexpr std::uint32_t kFormatVersion = 1;
inline constexpr const char* kManifestName = "MANIFEST.json";
inline constexpr const char* kLatestName = "latest";

std::filesystem::path checkpoints_dir(const std::filesystem::path& run_dir);
std::filesystem::path step_dir(const std::filesystem::path& run_dir, std::uint64_t step);

// One file of a checkpoint as the manifest lists it.
struct ManifestEntry {
  std::string part;  // e.g. "shard0"; the file is "<part>.state"
  std::string file;
  std::uint64_t nbytes = 0;
  std::uint32_t crc32 = 0;  // zlib's CRC-32 of the whole file
  friend bool operator==(const ManifestEntry&, const ManifestEntry&) = default;
};

struct Manifest {
  std::uint32_t format_version = kFormatVersion;
  std::uint64_t step = 0;
  std::string created_utc;  // ISO 8601, e.g. "2024-05-01T12:00:00Z"
  std::vector<ManifestEntry> files;
  // What the run was when it saved this step (an object, or null in older
  // checkpoints): its experiment's keys and its layout (rundir::checkpoint_stamp),
  // which a resume is checked against, whatever config.toml says now.
  nlohmann::json run;
};

// Serializes `state` into <run_dir>/checkpoints/<step>/<part>.state, creating
// the directories as needed. Part names are [A-Za-z0-9_-]+ (else
// InternalError). Writing into the step `latest` names is refused
// (OutputError 73): a committed checkpoint is never modified; check
// latest_step() first when a save may repeat the step a run resumed from.
// Writing into a step directory that has a manifest but is not `latest` (a
// save killed between the manifest and `latest`) first removes the manifest,
// so that directory is never a mix of two saves that claims to be complete.
// Write failures: OutputError (74) naming the file and the OS reason.
void write_part(const std::filesystem::path& run_dir, std::uint64_t step, const std::string& part,
                const State& state);

// Publishes step `step`: reads every part file back, records its size and
// CRC-32 in MANIFEST.json, then points `latest` at the step. `parts` are all
// the parts of the step, whichever rank wrote them; a missing one is an
// OutputError (74) and nothing is published.
Manifest commit(const std::filesystem::path& run_dir, std::uint64_t step,
                const std::vector<std::string>& parts, const nlohmann::json& run = nullptr);

// The single-process form: add() writes a part at once, commit() publishes
// the parts added here plus those other ranks wrote (by name).
class CheckpointWriter {
 public:
  CheckpointWriter(std::filesystem::path run_dir, std::uint64_t step);
  void add(const std::string& part, const State& state);
  // The run's stamp for the manifest (Manifest::run).
  void stamp(nlohmann::json run) { m_run = std::move(run); }
  Manifest commit(const std::vector<std::string>& parts_of_other_ranks = {});
  std::uint64_t step() const { return m_step; }

 private:
  std::filesystem::path m_run_dir;
  std::uint64_t m_step;
  std::vector<std::string> m_parts;
  nlohmann::json m_run;
};

// A loaded checkpoint: its manifest and the parts asked for, each a State
// whose path is the part name (errors read "checkpoint field shard0.optim...").
struct Checkpoint {
  std::uint64_t step = 0;
  std::filesystem::path dir;
  Manifest manifest;
  std::vector<std::pair<std::string, State>> parts;  // manifest order

  bool has_part(std::string_view name) const;
  // DataError naming the checkpoint and the parts it has when absent.
  const State& part(std::string_view name) const;
};

// The step `latest` names, or nullopt when there is no `latest` (nothing was
// ever committed). DataError (65) if `latest` exists but does not hold a step.
std::optional<std::uint64_t> latest_step(const std::filesystem::path& run_dir);

// Loads the checkpoint `latest` names after checking the manifest (format,
// version, step), that every listed file exists with its recorded size, and
// the CRC-32 of every part loaded. `only` limits the parts read, checksummed
// and deserialized (a rank that needs its own part only); empty = all.
// No `latest`: MissingInputError (66) saying there is nothing to resume and
// how to start fresh. Anything corrupt or missing after that: DataError (65)
// naming the file and what was expected and found.
Checkpoint load_latest(const std::filesystem::path& run_dir,
                       const std::vector<std::string>& only = {});
Checkpoint load_step(const std::filesystem::path& run_dir, std::uint64_t step,
                     const std::vector<std::string>& only = {});

// The manifest of step `step` alone (no part read): DataError (65) when it
// is missing or malformed.
Manifest read_manifest(const std::filesystem::path& run_dir, std::uint64_t step);

// Steps whose directory has a manifest, ascending.
std::vector<std::uint64_t> committed_steps(const std::filesystem::path& run_dir);

// Removes what a save killed midway leaves behind: "*.tmp.*" files in the
// checkpoints directory and its step directories, and step directories with
// no manifest (never the one `latest` names). Returns what it removed. Call it
// on one rank before any rank saves (at start-up): it would take a step being
// written for a dead one.
std::vector<std::filesystem::path> remove_stale_temporaries(const std::filesystem::path& run_dir);

// Keeps the newest `keep` committed checkpoints and the one `latest` names,
// removes the other committed step directories (manifest first, so a kill
// midway leaves a directory remove_stale_temporaries clears). Returns the
// steps removed.
std::vector<std::uint64_t> prune(const std::filesystem::path& run_dir, std::size_t keep);

}  // namespace syncopt::checkpoint
