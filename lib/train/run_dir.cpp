// Run directory at start, and run outcomes (see run_dir.hpp).
#include "train/run_dir.hpp"

#include <spdlog/spdlog.h>

#include <set>
#include <sstream>

#include "checkpoint/checkpoint.hpp"
#include "common/atomic_file.hpp"
#include "common/signals.hpp"
#include "metrics/records.hpp"

namespace syncopt::train {

namespace {

// Keys a resumed run may change: how it is run and recorded, not what is
// trained.
const std::set<std::string> kResumeMayChange = {"run.resume",
                                                "run.overwrite",
                                                "run.checkpoint_every_s",
                                                "run.checkpoint_every_steps",
                                                "run.keep_checkpoints",
                                                "run.progress",
                                                "run.progress_every_steps",
                                                "run.tensorboard",
                                                "cluster.dead_after_s",
                                                "eval.every_steps",
                                                "eval.every_s",
                                                "eval.batch",
                                                "compute.threads"};

// "section.key" -> "value" for every line of to_toml's text.
std::map<std::string, std::string> key_values(const std::string& toml) {
  std::map<std::string, std::string> out;
  std::istringstream in(toml);
  std::string section;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    if (line.front() == '[') {
      section = line.substr(1, line.find(']') - 1);
      continue;
    }
    const auto eq = line.find(" = ");
    if (eq == std::string::npos) continue;
    out[section + "." + line.substr(0, eq)] = line.substr(eq + 3);
  }
  return out;
}

void check_same_experiment(const config::Config& cfg, const std::filesystem::path& saved) {
  const auto before = key_values(read_file_bytes(saved));
  const auto now = key_values(config::to_toml(cfg));
  std::string diffs;
  for (const auto& [key, value] : now) {
    if (kResumeMayChange.count(key) > 0) continue;
    const auto it = before.find(key);
    const std::string old = it == before.end() ? "(absent)" : it->second;
    if (old != value) diffs += "\n  " + key + ": " + old + " in the run, " + value + " now";
  }
  if (!diffs.empty()) {
    throw ConfigError("run.resume = true, but this config is not the experiment in '" +
                      saved.string() + "':" + diffs +
                      "\nresume with the run's own config (syncopt train " + saved.string() +
                      " --set run.resume=true) or start a new run under another run.name");
  }
}

}  // namespace

std::filesystem::path open_run_dir(const config::Config& cfg) {
  const auto dir = std::filesystem::path(cfg.run.dir) / cfg.run.name;
  if (!cfg.run.resume) {
    metrics::create_run_dir(cfg.run.dir, cfg.run.name, cfg.run.overwrite);
    metrics::write_file_atomic(dir / "config.toml", config::to_toml(cfg));
    return dir;
  }
  if (!std::filesystem::exists(dir / "config.toml")) {
    throw MissingInputError("run.resume = true, but '" + dir.string() +
                            "' holds no run (no config.toml): nothing to resume; check run.dir "
                            "and run.name, or start fresh with run.resume = false");
  }
  check_same_experiment(cfg, dir / "config.toml");
  for (const auto& p : checkpoint::remove_stale_temporaries(dir)) {
    spdlog::info("removed what an interrupted checkpoint save left: {}", p.string());
  }
  return dir;
}

Outcome Outcome::stopped(int signal, std::uint64_t step) {
  Outcome o;
  o.exit_code = ExitCode::kPreempted;
  o.detail = signal_name(signal) + " at step " + std::to_string(step);
  return o;
}

Outcome Outcome::from_code(ExitCode code, const std::string& detail) {
  Outcome o;
  o.exit_code = code;
  o.detail = detail;
  return o;
}

Outcome Outcome::failed(const Error& e) {
  Outcome o;
  o.exit_code = e.code();
  o.detail = e.what();
  return o;
}

nlohmann::json Outcome::to_json() const {
  nlohmann::json j = {{"status", status_name(status())},
                      {"exit_code", static_cast<int>(exit_code)}};
  if (status() == RunStatus::kStopped) j["stopped"] = detail;
  if (status() == RunStatus::kFailed) j["error"] = detail;
  return j;
}

void write_failure_summary(const std::filesystem::path& run_dir, const Outcome& outcome) {
  try {
    nlohmann::json j = outcome.to_json();
    write_file_atomic(run_dir / "summary.json", metrics::json_text(j, 2) + "\n");
  } catch (const std::exception& e) {
    spdlog::error("could not record the failure in {}: {}", (run_dir / "summary.json").string(),
                  e.what());
  }
}

}  // namespace syncopt::train
