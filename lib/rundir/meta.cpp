// run.json, the verdict on a run directory, and repeat names (see meta.hpp).
#include "rundir/meta.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "checkpoint/checkpoint.hpp"
#include "common/atomic_file.hpp"
#include "common/error.hpp"
#include "config/config.hpp"
#include "metrics/records.hpp"

namespace syncopt::rundir {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kFormatVersion = 1;

std::string host_name() {
  std::array<char, 256> buf{};
  if (gethostname(buf.data(), buf.size() - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf.data();
}

std::string first_line(const fs::path& p) {
  std::ifstream in(p);
  std::string line;
  std::getline(in, line);
  return line;
}

std::string parent_name() { return first_line("/proc/" + std::to_string(getppid()) + "/comm"); }

json launcher_json(int world) {
  const std::string parent = parent_name();
  const std::string launcher = launcher_name(world);
  json out = {{"launcher", launcher}, {"parent_process", parent}};
  // The job as SLURM names it; only the variables that are set.
  json slurm = json::object();
  for (const char* var :
       {"SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID",
        "SLURM_RESTART_COUNT", "SLURM_STEP_ID", "SLURM_JOB_NODELIST", "SLURM_NTASKS",
        "SLURM_JOB_PARTITION", "SLURM_JOB_ACCOUNT", "SLURM_SUBMIT_DIR"}) {
    if (const char* v = std::getenv(var)) slurm[std::string(var).substr(6)] = v;
  }
  if (!slurm.empty()) out["slurm"] = slurm;
  return out;
}

json layout_json(const layout::Roles& roles) {
  const auto& t = config::traits(roles.mode);
  json l = {{"mode", config::mode_name(roles.mode)},
            {"world", roles.world},
            {"shards", roles.shards},
            {"evaluator_rank", roles.evaluator_rank >= 0 ? json(roles.evaluator_rank) : json()},
            {"workers", roles.workers},
            {"N", roles.rule.n},
            {"b", roles.rule.backups}};
  if (t.has_backups && roles.rule.adaptive) l["b"] = "auto";
  return l;
}

json files_json(const std::vector<std::string>& paths) {
  json out = json::array();
  for (const auto& p : paths) {
    json f = {{"path", p}};
    // The text as it was read: the file may change after the run.
    try {
      f["text"] = read_file_bytes(p);
    } catch (const std::exception&) {
      f["text"] = nullptr;
    }
    out.push_back(f);
  }
  return out;
}

std::string age_text(double s) {
  char buf[32];
  if (s < 120) {
    std::snprintf(buf, sizeof(buf), "%.0f s", s);
  } else if (s < 7200) {
    std::snprintf(buf, sizeof(buf), "%.0f min", s / 60);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f h", s / 3600);
  }
  return buf;
}

// Seconds since the newest of the records was written, or < 0.
double record_age_s(const fs::path& run_dir) {
  double best = -1.0;
  for (const char* f : {"steps.jsonl", "eval.jsonl"}) {
    std::error_code ec;
    const auto t = fs::last_write_time(run_dir / f, ec);
    if (ec) continue;
    const double age = std::chrono::duration<double>(fs::file_time_type::clock::now() - t).count();
    best = best < 0 ? age : std::min(best, age);
  }
  return best;
}

// The state letter of a live process whose command line names syncopt
// ('R', 'S', 'T' stopped, ...), or 0 when there is none (a reused pid is
// another program).
char process_state(long pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  std::ifstream cmd(proc + "/cmdline", std::ios::binary);
  if (!cmd) return 0;
  std::stringstream text;
  text << cmd.rdbuf();
  if (text.str().find("syncopt") == std::string::npos) return 0;
  const std::string stat = first_line(proc + "/stat");
  const auto close = stat.rfind(')');
  if (close == std::string::npos || close + 2 >= stat.size()) return 0;
  return stat[close + 2];
}

}  // namespace

std::string new_id() {
  std::random_device rd;
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%08x%08x%08x%08x", rd(), rd(), rd(), rd());
  return buf;
}

namespace {

// The directory as run.json records it: absolute, symlinks resolved.
std::string dir_key(const fs::path& dir) {
  std::error_code ec;
  const auto c = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  return (ec ? fs::absolute(dir) : c).lexically_normal().string();
}

// The run id recorded in <dir>/run.json, or "".
std::string run_id_at(const fs::path& dir) {
  try {
    return json::parse(read_file_bytes(dir / "run.json")).value("run_id", std::string());
  } catch (const std::exception&) {
    return "";
  }
}

// Every rank of the launch: rank, role, host, pid (this process alone
// when there is no MPI job to ask).
json ranks_json(const LaunchFacts& facts) {
  json ranks = json::array();
  if (facts.ranks.empty()) {  // one process, no MPI job to ask
    ranks.push_back({{"rank", 0},
                     {"role", facts.process_role},
                     {"host", host_name()},
                     {"pid", static_cast<int>(getpid())}});
  }
  for (std::size_t r = 0; r < facts.ranks.size(); ++r) {
    ranks.push_back({{"rank", r},
                     {"role", facts.roles.role_name(static_cast<int>(r))},
                     {"host", facts.ranks[r].host},
                     {"pid", facts.ranks[r].pid}});
  }
  return ranks;
}

// The hosts of `ranks` in the order of their first rank, each with its ranks.
json hosts_json(const json& ranks) {
  json hosts = json::array();
  for (const auto& r : ranks) {
    auto it = std::find_if(hosts.begin(), hosts.end(),
                           [&](const json& h) { return h["host"] == r["host"]; });
    if (it == hosts.end()) {
      hosts.push_back({{"host", r["host"]}, {"ranks", json::array()}});
      it = hosts.end() - 1;
    }
    (*it)["ranks"].push_back(r["rank"]);
  }
  return hosts;
}

}  // namespace

std::string describe_invocation(const Invocation& inv) {
  std::string cmd;
  for (const auto& a : inv.argv) cmd += (cmd.empty() ? "" : " ") + a;
  std::error_code ec;
  return "    " + cmd + "\n\nsyncopt " + inv.version + " (git " + inv.git_commit +
         (inv.git_dirty ? ", modified" : "") + "), on " + host_name() + " in " +
         fs::current_path(ec).string() + ", " + utc_now() + "\n";
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

RunJournal::RunJournal(const fs::path& run_dir, const std::string& run_name, const Invocation& inv,
                       const LaunchFacts& facts, bool resumed, const std::string& start_utc)
    : m_path(run_dir / "run.json") {
  if (resumed && fs::exists(m_path)) {
    try {
      m_doc = json::parse(read_file_bytes(m_path));
    } catch (const std::exception& e) {
      std::error_code ec;
      fs::rename(m_path, run_dir / "run.json.bad", ec);
      spdlog::warn("{} is not JSON ({}): kept as run.json.bad, a new one started", m_path.string(),
                   e.what());
      m_doc = json();
    }
  }
  if (!m_doc.is_object() || !m_doc.contains("launches")) {
    m_doc = {{"format", "syncopt-run"},
             {"format_version", kFormatVersion},
             {"name", run_name},
             {"run_id", new_id()},
             {"launches", json::array()}};
  }
  // Where the run was last launched: elsewhere now means moved or copied.
  const std::string here = dir_key(run_dir);
  std::string was;
  for (auto it = m_doc["launches"].rbegin(); it != m_doc["launches"].rend(); ++it) {
    if (it->contains("dir") && (*it)["dir"].is_string()) {
      was = (*it)["dir"].get<std::string>();
      break;
    }
  }
  if (!m_doc.contains("run_id") || !m_doc["run_id"].is_string()) m_doc["run_id"] = new_id();
  json moved;
  if (resumed && !was.empty() && was != here) {
    const std::string old_id = m_doc["run_id"].get<std::string>();
    std::error_code ec;
    const bool original_there = fs::exists(fs::path(was), ec) &&
                                !fs::equivalent(fs::path(was), run_dir, ec) &&
                                run_id_at(was) == old_id;
    if (original_there) {
      // A copy: the original goes on as itself; this one is a run of its own.
      m_doc["run_id"] = new_id();
      m_doc["name"] = run_name;
      moved = {{"copied_from", {{"dir", was}, {"run_id", old_id}}}};
      spdlog::info(
          "{} is a copy of the run in {} (run {}): it continues here as a new run, {}; the "
          "original is untouched",
          here, was, old_id, m_doc["run_id"].get<std::string>());
    } else {
      m_doc["name"] = run_name;
      moved = {{"moved_from", was}};
      spdlog::info("the run {} was in {}; it continues where it is now, {}", old_id, was, here);
    }
  }
  m_run_id = m_doc["run_id"].get<std::string>();
  const json ranks = ranks_json(facts);
  std::error_code ec;
  json launch = {
      {"launch_id", inv.launch_id.empty() ? new_id() : inv.launch_id},
      {"start_utc", start_utc.empty() ? utc_now() : start_utc},
      {"end_utc", nullptr},
      {"status", "running"},
      {"exit_code", nullptr},
      {"resumed", resumed},
      {"argv", inv.argv},
      {"cwd", fs::current_path(ec).string()},
      {"dir", here},
      {"config", inv.config_path},
      {"config_files", files_json(inv.config_files)},
      {"overrides", inv.overrides},
      {"syncopt",
       {{"version", inv.version}, {"git_commit", inv.git_commit}, {"git_modified", inv.git_dirty}}},
      {"host", facts.ranks.empty() ? host_name() : facts.ranks[0].host},
      {"pid", facts.ranks.empty() ? static_cast<int>(getpid()) : facts.ranks[0].pid},
      {"hosts", hosts_json(ranks)},
      {"ranks", ranks},
      {"layout", layout_json(facts.roles)}};
  if (!inv.repeat_of.empty()) launch["repeat_of"] = inv.repeat_of;
  if (!inv.restart.is_null()) launch["restart"] = inv.restart;
  if (!moved.is_null()) launch.update(moved);
  launch.update(launcher_json(facts.roles.world));
  m_doc["launches"].push_back(launch);
  write();
}

void RunJournal::write() const { write_file_atomic(m_path, metrics::json_text(m_doc, 2) + "\n"); }

namespace {

void set_end(json& launch, const Outcome& outcome) {
  launch["end_utc"] = utc_now();
  launch["status"] = status_name(outcome.status());
  launch["exit_code"] = static_cast<int>(outcome.exit_code);
  if (!outcome.detail.empty()) launch["detail"] = outcome.detail;
  if (!outcome.reported_by.is_null()) launch["reported_by"] = outcome.reported_by;
}

}  // namespace

void RunJournal::finish(const Outcome& outcome) noexcept {
  if (m_path.empty() || m_finished) return;
  m_finished = true;
  try {
    set_end(m_doc["launches"].back(), outcome);
    write();
  } catch (const std::exception& e) {
    spdlog::error("could not record the end of the run in {}: {}", m_path.string(), e.what());
  }
}

void RunJournal::note(const std::string& key, const json& value) noexcept {
  if (m_path.empty()) return;
  try {
    m_doc["launches"].back()[key] = value;
    write();
  } catch (const std::exception& e) {
    spdlog::error("could not write {}: {}", m_path.string(), e.what());
  }
}

void RunJournal::record_end(const fs::path& run_dir, const std::string& launch_id,
                            const Outcome& outcome) noexcept {
  const fs::path path = run_dir / "run.json";
  try {
    json doc = json::parse(read_file_bytes(path));
    for (auto& launch : doc.at("launches")) {
      if (launch.value("launch_id", std::string()) != launch_id) continue;
      set_end(launch, outcome);
      write_file_atomic(path, metrics::json_text(doc, 2) + "\n");
      return;
    }
    spdlog::warn("{} has no launch {}: its end is not recorded there", path.string(), launch_id);
  } catch (const std::exception& e) {
    spdlog::error("could not record the end of the run in {}: {}", path.string(), e.what());
  }
}

RunState run_status(const fs::path& run_dir) {
  const auto ckpt = checkpoint::latest_step(run_dir);
  const std::string resume = ckpt ? "; resume from its checkpoint at step " +
                                        std::to_string(*ckpt) + " with --set run.resume=true"
                                  : "";
  if (fs::exists(run_dir / "summary.json")) {
    json s;
    try {
      s = json::parse(read_file_bytes(run_dir / "summary.json"));
    } catch (const std::exception& e) {
      throw DataError((run_dir / "summary.json").string() + ": not JSON (" + e.what() + ")");
    }
    const std::string completed = status_name(RunStatus::kCompleted);
    const std::string status = s.value("status", completed);
    if (status == completed) return {status, ""};
    // A later launch that ended without a summary of its own (refused
    // before it trained): run.json says how.
    std::string later;
    try {
      const json last = json::parse(read_file_bytes(run_dir / "run.json")).at("launches").back();
      if (s.contains("launch_id") && last.value("launch_id", "") != s.value("launch_id", "") &&
          last.contains("exit_code") && last["exit_code"].is_number()) {
        later = "; a later launch (" + last.value("start_utc", std::string("?")) +
                ") ended with exit " + last["exit_code"].dump() + ": " +
                last.value("detail", std::string("see run.json"));
      }
    } catch (const std::exception&) {
    }
    if (status == status_name(RunStatus::kStopped)) {
      return {status, "stopped (" + s.value("stopped", std::string("by a signal")) +
                          ") before the end" + resume + later};
    }
    return {status, status + " with exit code " +
                        (s.contains("exit_code") ? s["exit_code"].dump() : std::string("?")) +
                        ": " + s.value("error", std::string("see its log")) + later};
  }
  const double age_s = record_age_s(run_dir);
  const std::string age = age_s < 0 ? "unknown" : age_text(age_s);
  json launch;
  try {
    const json doc = json::parse(read_file_bytes(run_dir / "run.json"));
    launch = doc.at("launches").back();
  } catch (const std::exception&) {
    return {"unknown",
            "no summary.json (and no run.json): still running, or killed; its last "
            "record was written " +
                age + " ago"};
  }
  const std::string host = launch.value("host", std::string());
  const long pid = launch.value("pid", 0L);
  if (host != host_name()) {
    return {"unknown", "no summary.json: still running on " + host + " (rank 0, pid " +
                           std::to_string(pid) +
                           "), or ended there without one (killed); its last record was "
                           "written " +
                           age + " ago"};
  }
  const char state = process_state(pid);
  if (state == 'T') {
    return {"paused", "no summary.json: rank 0 (pid " + std::to_string(pid) +
                          ") is stopped (SIGSTOP or a suspended job); its last record was "
                          "written " +
                          age + " ago"};
  }
  if (state != 0) {
    return {"running", "no summary.json yet: running as pid " + std::to_string(pid) +
                           "; its last record was written " + age + " ago"};
  }
  return {"killed", "no summary.json: rank 0 (pid " + std::to_string(pid) + " on " + host +
                        ") is gone without writing one (killed by a signal, out of memory, or "
                        "its job ended); its last record was written " +
                        age + " ago" + resume};
}

metrics::RunInfo partial_run_info(const fs::path& run_dir,
                                  const std::vector<metrics::StepRecord>& steps,
                                  const std::vector<json>& evals) {
  metrics::RunInfo info;
  json layout;
  try {
    layout = json::parse(read_file_bytes(run_dir / "run.json")).at("launches").back().at("layout");
  } catch (const std::exception&) {
    layout = json::object();
  }
  std::string mode_name;
  std::int64_t ps = 0;
  if (fs::exists(run_dir / "config.toml")) {
    const config::Config cfg = config::load((run_dir / "config.toml").string(), {});
    info.batch = cfg.train.batch;
    mode_name = config::mode_name(cfg.train.mode);
    ps = cfg.cluster.ps;
    if (config::traits(cfg.train.mode).uses_ps) info.wire = config::to_string(cfg.exchange.wire);
    info.b = config::is_auto(cfg.train.backups)
                 ? 0
                 : static_cast<int>(std::get<std::int64_t>(cfg.train.backups));
  }
  mode_name = layout.value("mode", mode_name.empty() ? std::string("local") : mode_name);
  const auto mode = config::enum_from_name<config::Mode>(mode_name);
  if (!mode) throw DataError((run_dir / "run.json").string() + ": unknown mode " + mode_name);
  info.mode = *mode;
  // Without run.json: what the records show (workers seen, the largest N used).
  std::set<int> workers;
  int used = 1;
  std::uint64_t examples = 0;
  double last_apply = 0.0;
  for (const auto& r : steps) {
    for (const auto& g : r.grads) workers.insert(g.worker);
    if (r.shard != 0) continue;
    used = std::max(used, r.used);
    examples += static_cast<std::uint64_t>(r.used) * static_cast<std::uint64_t>(info.batch);
    last_apply = std::max(last_apply, r.t_apply);
  }
  info.workers = layout.value("workers", std::max(1, static_cast<int>(workers.size())));
  info.n = layout.value("N", used);
  info.shards =
      layout.value("shards", static_cast<int>(config::traits(info.mode).uses_ps ? ps : 0));
  if (layout.contains("b") && layout["b"].is_number()) info.b = layout["b"].get<int>();
  if (!config::traits(info.mode).has_backups) info.b = 0;
  info.examples = examples;
  info.wall_s = last_apply;
  info.epochs = -1.0;
  // eval.jsonl gives epochs per example at each evaluation.
  for (auto it = evals.rbegin(); it != evals.rend(); ++it) {
    const double ex = it->value("examples", 0.0), ep = it->value("epoch", 0.0);
    if (ex > 0 && ep > 0) {
      info.epochs = static_cast<double>(examples) * ep / ex;
      break;
    }
  }
  return info;
}

std::string repeat_name(const fs::path& config_path, const std::string& run_dir,
                        const std::string& run_name) {
  std::error_code ec;
  const fs::path own = fs::path(run_dir) / run_name / "config.toml";
  if (config_path.filename() != "config.toml" || !fs::exists(own, ec) ||
      !fs::equivalent(config_path, own, ec)) {
    return "";
  }
  for (int n = 2;; ++n) {
    const std::string name = run_name + "-" + std::to_string(n);
    if (!fs::exists(fs::path(run_dir) / name, ec)) return name;
  }
}

json describe_layout(const layout::Roles& roles) { return layout_json(roles); }

std::string launcher_name(int world) {
  // Open MPI's launchers (mpirun, or orted/prted on other nodes), slurmstepd
  // for srun, else nothing (a shell: one process).
  const std::string parent = parent_name();
  std::string launcher = world == 1 ? "none" : "unknown";
  for (const char* name : {"mpirun", "mpiexec", "orterun", "orted", "prterun", "prted"}) {
    if (parent.starts_with(name)) launcher = "mpirun";
  }
  if (parent.starts_with("slurmstepd")) launcher = "srun";
  return launcher;
}

std::vector<std::string> mpirun_words(const std::string& program) {
  const std::string parent = parent_name();
  bool mpirun = false;
  for (const char* name : {"mpirun", "mpiexec", "orterun", "prterun"}) {
    mpirun = mpirun || parent.starts_with(name);
  }
  if (!mpirun || program.empty()) return {};
  std::ifstream in("/proc/" + std::to_string(getppid()) + "/cmdline", std::ios::binary);
  std::vector<std::string> words;
  for (std::string w; std::getline(in, w, '\0');) words.push_back(w);
  for (std::size_t i = 1; i < words.size(); ++i) {
    if (words[i] == program) {
      words.resize(i);
      return words;
    }
  }
  return {};
}

}  // namespace syncopt::rundir
