// Run directory at start, and run outcomes (see open.hpp).
#include "rundir/open.hpp"

#include <spdlog/spdlog.h>

#include <map>
#include <set>
#include <sstream>

#include "checkpoint/checkpoint.hpp"
#include "common/atomic_file.hpp"
#include "common/signals.hpp"
#include "metrics/records.hpp"

namespace syncopt::rundir {

namespace fs = std::filesystem;

namespace {

// Keys a resumed run may change: how it is run and recorded, where the run
// directory is, and how long it trains (with the schedule keys that depend
// on the total), not what each step computes.
const std::set<std::string> kResumeMayChange = {
    "run.resume", "run.reshape", "run.overwrite", "run.dir", "run.name", "run.checkpoint_every_s",
    "run.checkpoint_every_steps", "run.keep_checkpoints", "run.progress",
    "run.progress_every_steps", "run.tensorboard", "run.flight_events", "train.steps",
    "train.epochs", "optim.anneal_epochs", "cluster.dead_after_s", "eval.every_steps",
    "eval.every_s", "eval.batch", "compute.threads", "compute.memory_limit_gb",
    // The shape: a checkpoint resumes on other shards and workers (docs/design.md §10).
    "cluster.ps",
    // Checkpoints are FP32 (docs/design.md §5):
    "compute.precision", "compute.tf32", "compute.deterministic", "exchange.wire"};

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

// The layout of the run's last launch before `current` that was not refused
// (run.json), or null. A launch refused as misconfigured (78: another
// number of ranks, another experiment) trained nothing and changes nothing
// about what the run can resume with.
nlohmann::json last_layout(const fs::path& dir, const std::string& current) {
  try {
    const auto doc = nlohmann::json::parse(read_file_bytes(dir / "run.json"));
    const auto& launches = doc.at("launches");
    for (auto it = launches.rbegin(); it != launches.rend(); ++it) {
      if (!current.empty() && it->value("launch_id", std::string()) == current) continue;
      const auto code = it->value("exit_code", nlohmann::json());
      if (code.is_number_integer() && code.get<int>() == static_cast<int>(ExitCode::kConfig))
        continue;
      if (it->contains("layout") && (*it)["layout"].contains("world")) return (*it)["layout"];
    }
  } catch (const std::exception&) {
  }
  return nullptr;
}

// The stamp of the checkpoint `latest` names (null: no checkpoint, or one
// saved before checkpoints carried a stamp).
nlohmann::json latest_stamp(const fs::path& dir) {
  const auto step = checkpoint::latest_step(dir);
  if (!step) return nullptr;
  nlohmann::json stamp = checkpoint::read_manifest(dir, *step).run;
  if (stamp.is_object()) stamp["step"] = *step;
  return stamp;
}

// The experiment keys a stamp holds ("section.key" -> value).
std::map<std::string, std::string> stamped_keys(const nlohmann::json& stamp) {
  std::map<std::string, std::string> out;
  if (!stamp.is_object() || !stamp.contains("experiment") || !stamp["experiment"].is_object())
    return out;
  for (const auto& [key, value] : stamp["experiment"].items()) {
    if (value.is_string()) out[key] = value.get<std::string>();
  }
  return out;
}

// A new run in an existing directory with run.overwrite: once its lock is
// ours, everything but the lock file goes.
void clear_for_overwrite(const fs::path& dir) {
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename() == kRunLockFile) continue;
    fs::remove_all(entry.path(), ec);
    if (ec) {
      throw OutputError(ExitCode::kCantCreate,
                        "cannot clear run directory '" + dir.string() + "': " + ec.message());
    }
  }
}

}  // namespace

bool resume_may_change(const std::string& key) { return kResumeMayChange.count(key) > 0; }

void check_new_run_dir(const config::Config& cfg) {
  if (cfg.run.resume || cfg.run.overwrite) return;
  const auto dir = fs::path(cfg.run.dir) / cfg.run.name;
  std::error_code ec;
  if (!fs::exists(dir, ec)) return;
  const bool in_use = RunLock::held_by_other(dir);
  const auto holder = RunLock::read_holder(dir);
  throw OutputError(ExitCode::kCantCreate,
                    "run directory '" + dir.string() + "' already exists" +
                        (in_use && holder ? " and is in use by " + holder->describe() : "") +
                        " and would be overwritten; pick a new name (--set run.name=...), " +
                        "repeat it under a new name (syncopt train " +
                        (dir / "config.toml").string() + ", which picks " + cfg.run.name +
                        "-2, ...), resume it (--set run.resume=true) or replace it "
                        "(--set run.overwrite=true)");
}

OpenedRun open_run_dir(const config::Config& cfg, const LockHolder& me) {
  const auto dir = fs::path(cfg.run.dir) / cfg.run.name;
  OpenedRun out;
  out.dir = dir;
  if (!cfg.run.resume) {
    std::error_code ec;
    const bool existed = fs::exists(dir, ec);
    // Checked before the data are loaded too (syncopt train); again here, as
    // another job may have created it since.
    check_new_run_dir(cfg);
    if (!existed) metrics::create_run_dir(cfg.run.dir, cfg.run.name, false);
    try {
      out.lock = RunLock::acquire(dir, me, existed ? "replace" : "start");
      if (existed) clear_for_overwrite(dir);
      metrics::write_file_atomic(dir / "config.toml", config::to_toml(cfg));
    } catch (const Error&) {
      // A directory this start created and could not fill (a full disk)
      // holds nothing of a run: it goes, so that the same command works
      // once there is room, instead of finding it taken (73).
      if (!existed) {
        out.lock = RunLock();
        std::error_code rm;
        fs::remove_all(dir, rm);
      }
      throw;
    }
    return out;
  }
  if (!fs::exists(dir / "config.toml")) {
    throw MissingInputError("run.resume = true, but '" + dir.string() +
                            "' holds no run (no config.toml): nothing to resume; check run.dir "
                            "and run.name, or start fresh with run.resume = false");
  }
  out.lock = RunLock::acquire(dir, me, "resume");
  for (const auto& p : checkpoint::remove_stale_temporaries(dir)) {
    spdlog::info("removed what an interrupted checkpoint save left: {}", p.string());
  }
  return out;
}

std::string layout_words(const nlohmann::json& l) {
  const int shards = l.value("shards", 0);
  std::string out = std::to_string(l.value("world", 0)) + " ranks: ";
  if (shards > 0) {
    out += std::to_string(shards) + (shards == 1 ? " shard, " : " shards, ");
    if (!l.value("evaluator_rank", nlohmann::json()).is_null()) out += "1 evaluator, ";
  }
  return out + std::to_string(l.value("workers", 0)) + " workers";
}

nlohmann::json checkpoint_stamp(const config::Config& cfg, const nlohmann::json& layout) {
  nlohmann::json experiment = nlohmann::json::object();
  for (const auto& [key, value] : key_values(config::to_toml(cfg))) {
    if (!resume_may_change(key)) experiment[key] = value;
  }
  return {{"experiment", experiment}, {"layout", layout}};
}

namespace {

// The experiment keys of `cfg` that differ from the run's: the stamp of its
// latest checkpoint when it has one (what it trained with), else its
// config.toml. One line per key; empty when it is the same experiment.
std::string experiment_diffs(const std::map<std::string, std::string>& now,
                             const std::map<std::string, std::string>& before) {
  std::string diffs;
  for (const auto& [key, value] : now) {
    if (resume_may_change(key)) continue;
    const auto it = before.find(key);
    const std::string old = it == before.end() ? "(absent)" : it->second;
    if (old != value) diffs += "\n  " + key + ": " + old + " in the run, " + value + " now";
  }
  return diffs;
}

}  // namespace

std::vector<std::string> check_resume(const config::Config& cfg, const fs::path& dir, int world,
                                      const std::string& launch_id) {
  const fs::path saved = dir / "config.toml";
  const auto in_file = key_values(read_file_bytes(saved));
  const auto now = key_values(config::to_toml(cfg));
  const nlohmann::json stamp = latest_stamp(dir);
  const auto in_checkpoint = stamped_keys(stamp);
  const bool stamped = !in_checkpoint.empty();
  std::vector<std::string> changed;
  for (const auto& [key, value] : now) {
    if (!resume_may_change(key) || key == "run.resume" || key == "run.dir" || key == "run.name")
      continue;
    const auto it = in_file.find(key);
    const std::string old = it == in_file.end() ? "(absent)" : it->second;
    if (old != value) changed.push_back(key + ": " + old + " -> " + value);
  }
  if (const std::string diffs = experiment_diffs(now, stamped ? in_checkpoint : in_file);
      !diffs.empty()) {
    const std::string step = stamped ? stamp.value("step", nlohmann::json()).dump() : "";
    const bool edited = stamped && !experiment_diffs(in_file, in_checkpoint).empty();
    throw ConfigError(
        "run.resume = true, but this config is not the experiment in '" + saved.string() + "'" +
        (stamped ? " (as its checkpoint at step " + step + " recorded it)" : std::string()) + ":" +
        diffs +
        (edited ? "\n" + saved.string() +
                      " was edited after that checkpoint was saved: put back "
                      "the values the run trained with"
                : std::string()) +
        "\nresume with the run's own config (syncopt train " + saved.string() +
        " --set run.resume=true; train.steps, train.epochs and optim.anneal_epochs may change "
        "to extend it) or start a new run under another run.name");
  }
  const bool from_checkpoint = stamp.is_object() && stamp.contains("layout");
  // A checkpoint that says which layout saved it resumes on another shape
  // with run.reshape (train/reshape.hpp), the local trainer (one rank) apart.
  const auto may_reshape = [&](const nlohmann::json& l) {
    return from_checkpoint && world > 1 && l.value("world", 0) > 1;
  };
  const auto layout = from_checkpoint ? stamp["layout"] : last_layout(dir, launch_id);
  const bool other_world = world > 0 && layout.is_object() && layout.value("world", 0) != world;
  const bool other_shards = layout.is_object() && layout.value("shards", 0) > 0 &&
                            layout.value("shards", 0) != cfg.cluster.ps;
  if ((other_world || other_shards) && !(cfg.run.reshape && may_reshape(layout))) {
    const std::string name = fs::path(dir).filename().string();
    const std::string ranks = std::to_string(world > 0 ? world : layout.value("world", 0));
    throw ConfigError(
        "cannot resume '" + dir.string() + "' with " + ranks + " ranks" +
        (other_shards ? " and cluster.ps = " + std::to_string(cfg.cluster.ps) : std::string()) +
        ": " +
        (from_checkpoint ? "its latest checkpoint (step " + stamp["step"].dump() + ") was saved by "
                         : std::string("the run was launched with ")) +
        layout_words(layout) +
        ", and its workers' data shards and checkpoint parts are laid out for that. Resume it "
        "with the same layout (mpirun -np " +
        std::to_string(layout.value("world", 0)) + " ... --set run.resume=true)" +
        (may_reshape(layout) ? ", on this one with --set run.reshape=true (N = workers - b; "
                               "docs/design.md section 10)"
                             : std::string()) +
        ", or train " + ranks + " ranks as a new run from the same config: --set run.name=" + name +
        "-np" + ranks + " (without run.resume)");
  }
  return changed;
}

void rewrite_config(const config::Config& cfg, const fs::path& dir) {
  config::Config written = cfg;
  written.run.resume = false;  // as a new run's: the file describes the experiment
  metrics::write_file_atomic(dir / "config.toml", config::to_toml(written));
}

bool resume_in_place(config::Config& cfg, const fs::path& config_path,
                     const std::vector<std::string>& overrides) {
  if (!cfg.run.resume || config_path.filename() != "config.toml") return false;
  for (const auto& o : overrides) {
    const auto key = o.substr(0, o.find('='));
    if (key.find("run.dir") != std::string::npos || key.find("run.name") != std::string::npos) {
      return false;  // said on the command line: that wins
    }
  }
  std::error_code ec;
  const fs::path dir =
      config_path.parent_path().empty() ? fs::path(".") : config_path.parent_path();
  // A run directory holds its records next to config.toml.
  if (!fs::exists(dir / "run.json", ec) && !fs::exists(dir / "checkpoints", ec)) return false;
  const fs::path abs = fs::absolute(dir, ec).lexically_normal();
  const fs::path clean = abs.filename().empty() ? abs.parent_path() : abs;
  cfg.run.dir = clean.parent_path().string();
  cfg.run.name = clean.filename().string();
  return true;
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
                      {"exit_code", static_cast<int>(exit_code)},
                      {"reason", detail.empty() ? nlohmann::json() : nlohmann::json(detail)},
                      {"reported_by", reported_by}};
  if (status() == RunStatus::kStopped) j["stopped"] = detail;
  if (status() == RunStatus::kFailed) j["error"] = detail;
  return j;
}

void write_failure_summary(const fs::path& run_dir, const Outcome& outcome,
                           const nlohmann::json& extra) {
  try {
    nlohmann::json j = outcome.to_json();
    for (const auto& [k, v] : extra.items()) j[k] = v;
    write_file_atomic(run_dir / "summary.json", metrics::json_text(j, 2) + "\n");
  } catch (const std::exception& e) {
    spdlog::error("could not record the failure in {}: {}", (run_dir / "summary.json").string(),
                  e.what());
  }
}

}  // namespace syncopt::rundir
