// libFuzzer target: the checkpoint reader. The first byte picks what the
// rest is: a part's .state file (checkpoint::State::deserialize, then every
// field read by its kind, as `syncopt checkpoints --fields` does), or a
// MANIFEST.json of a run directory whose `latest` names it
// (checkpoint::load_latest: the manifest checked, the parts it lists read
// and verified). Any syncopt::Error is an answer; anything else escaping, a
// crash or a sanitizer report is a finding.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/state.hpp"
#include "common/error.hpp"

namespace {

namespace fs = std::filesystem;

void walk(const syncopt::checkpoint::State& s, int depth) {
  for (const auto& name : s.names()) {
    const std::string kind = s.kind_of(name);
    if (kind == "child state") {
      if (depth < 64) walk(s.child(name), depth + 1);
    } else if (kind == "u64") {
      (void)s.get<std::uint64_t>(name);
    } else if (kind == "i64") {
      (void)s.get<std::int64_t>(name);
    } else if (kind == "f64") {
      (void)s.get<double>(name);
    } else if (kind == "string") {
      (void)s.get<std::string>(name);
    } else if (kind == "float array") {
      (void)s.get<std::vector<float>>(name);
    } else if (kind == "u64 array") {
      (void)s.get<std::vector<std::uint64_t>>(name);
    } else if (kind == "i64 array") {
      (void)s.get<std::vector<std::int64_t>>(name);
    }
  }
}

const fs::path& run_dir() {
  static const fs::path dir = [] {
    fs::path d = fs::temp_directory_path() / ("syncopt-fuzz-ckpt-" + std::to_string(::getpid()));
    fs::create_directories(d / "checkpoints" / "7");
    std::ofstream(d / "checkpoints" / "latest") << "7\n";
    // One real part for the manifest to list: an empty State.
    std::ofstream(d / "checkpoints" / "7" / "shard0.state", std::ios::binary)
        << syncopt::checkpoint::State().serialize();
    return d;
  }();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (data[0] % 2 == 0) {
      const auto s = syncopt::checkpoint::State::deserialize(rest, "fuzz.state", "part");
      walk(s, 0);
      (void)s.serialize();
    } else {
      std::ofstream(run_dir() / "checkpoints" / "7" / "MANIFEST.json", std::ios::binary) << rest;
      (void)syncopt::checkpoint::load_latest(run_dir());
    }
  } catch (const syncopt::Error&) {
  }
  return 0;
}
