// Crash-safe whole-file writes and reads, on plain POSIX calls so that every
// failure (a full disk, a vanished directory) is seen and reported: a file is
// written under a temporary name, fsynced, renamed into place, and its
// directory fsynced, so a reader finds either the old file or the new one,
// never a torn one, even after a kill or a power loss.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace syncopt {

// Writes `bytes` to `path` atomically: to "<path>.tmp.<pid>" in the same
// directory, fsync, rename onto `path`, fsync the directory. On any failure
// the temporary is removed, the previous file at `path` (if any) is left
// intact, and OutputError (exit 74) names the path and the OS reason.
// The directory must exist.
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

// fsync of a directory, so that entries created, renamed or removed in it
// survive a power loss. OutputError (74) on failure.
void fsync_dir(const std::filesystem::path& dir);

// The whole content of `path`. MissingInputError (66) if it does not exist or
// cannot be opened, DataError (65) if reading it fails midway.
std::string read_file_bytes(const std::filesystem::path& path);

// True for the temporaries write_file_atomic leaves behind when killed
// midway: names containing ".tmp." (e.g. "MANIFEST.json.tmp.4242").
bool is_atomic_temporary(const std::filesystem::path& path);

}  // namespace syncopt
