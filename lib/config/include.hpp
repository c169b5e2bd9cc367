// Config composition: a config may start from others and override their
// keys. A top-level `include` (before any [section]) names one file or a
// list, relative to the including file:
//
//   include = "base.toml"                    # or ["model.toml", "cluster.toml"]
//   [train]
//   backups = 2                              # overrides base.toml's
//
// The loader reads the files base first, each included file's own includes
// before it, the including file last, so a later file's key wins; a key set
// twice in one file is still an error. The resolved config (config.toml of
// a run) holds no include: every key is written out. Missing files and
// cycles are config errors naming the chain of files.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace syncopt::config {

// At most this many bytes of a config file are read: more is no config (a
// device such as /dev/zero, a data file given by mistake).
inline constexpr std::size_t kMaxConfigBytes = std::size_t{16} << 20;

// The text of `path`, read up to kMaxConfigBytes; nullopt when it cannot be
// opened. `too_big` says that the bound was reached (the text is cut there).
std::optional<std::string> read_config_text(const std::string& path, bool& too_big);

// One file of a composed config, as the loader reads it: the include line(s)
// blanked, so that every other line keeps its number in messages.
struct ConfigFile {
  std::string path;  // as found: relative to the including file's folder
  std::string text;
};

// The files that make `path`, base first, `path` last. A file that cannot be
// read or parsed is returned as it is (the loader reports it, with its line);
// problems of the includes themselves (a missing included file, a cycle, an
// include that is not a string or a list of strings) are appended to
// `problems` as "file:line: ..." messages.
std::vector<ConfigFile> resolve_includes(const std::string& path,
                                         std::vector<std::string>& problems);

// The paths `path` is made of, base first (for run.json); never throws.
std::vector<std::string> config_files(const std::string& path);

}  // namespace syncopt::config
