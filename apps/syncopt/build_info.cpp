// What this binary is: its version and the git commit it was built from
// (build_info.hpp, generated at every build by cmake/build_info.cmake), as
// `syncopt --version` prints it, run.json records it and ranks compare it.
#include "build_info.hpp"

#include <spdlog/spdlog.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "config/include.hpp"
#include "nn/backend.hpp"

namespace syncopt::app {

const std::string kBuildId = std::string("syncopt ") + SYNCOPT_VERSION + " (git " +
                             SYNCOPT_GIT_COMMIT + (SYNCOPT_GIT_DIRTY ? ", modified" : "") +
                             ") built " + __DATE__ + " " + __TIME__;

std::string version_text() {
  return kBuildId + "\ncompute: " + syncopt::nn::cpu_backend_description();
}

const char* const kVersion = SYNCOPT_VERSION;
const char* const kGitCommit = SYNCOPT_GIT_COMMIT;
const bool kGitDirty = SYNCOPT_GIT_DIRTY;

syncopt::rundir::Invocation make_invocation(const std::vector<std::string>& argv,
                                            const std::string& config_path,
                                            const std::vector<std::string>& overrides) {
  syncopt::rundir::Invocation inv;
  inv.argv = argv;
  inv.config_path = config_path;
  // The config and every file it includes, base first, absolute.
  for (const auto& f : syncopt::config::config_files(config_path)) {
    std::error_code ec;
    const auto abs = std::filesystem::absolute(f, ec);
    inv.config_files.push_back(ec ? f : abs.lexically_normal().string());
  }
  inv.overrides = overrides;
  inv.version = kVersion;
  inv.git_commit = kGitCommit;
  inv.git_dirty = kGitDirty;
  // Wrapper scripts name the launch, to find its outcome afterwards.
  const char* id = std::getenv("SYNCOPT_LAUNCH_ID");
  inv.launch_id = id != nullptr && *id != '\0' ? id : syncopt::rundir::new_id();
  // An elastic restart (scripts/run.sh, train.sbatch) says which one it is.
  if (const char* r = std::getenv("SYNCOPT_RESTART"); r != nullptr && *r != '\0') {
    inv.restart = nlohmann::json::parse(r, nullptr, false);
    if (!inv.restart.is_object()) {
      spdlog::warn("SYNCOPT_RESTART is not a JSON object ('{}'): run.json records it as text", r);
      inv.restart = {{"text", r}};
    }
  }
  return inv;
}

}  // namespace syncopt::app
