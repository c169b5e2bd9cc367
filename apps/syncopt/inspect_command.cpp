// `syncopt report`, `syncopt export`, `syncopt checkpoints`, `syncopt keys`
// (see commands.hpp).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "commands.hpp"
#include "common/atomic_file.hpp"
#include "common/error.hpp"
#include "config/config.hpp"
#include "metrics/analysis.hpp"
#include "metrics/export.hpp"
#include "metrics/flight_report.hpp"
#include "rundir/meta.hpp"
#include "train/weights.hpp"

namespace syncopt::app {

CLI::App* add_keys_command(CLI::App& app) {
  return app.add_subcommand(
      "keys",
      "Print the reference of every config key: type, default, allowed values, meaning "
      "(the same as the end of 'syncopt train --help'; configs/README.md holds a copy).");
}

namespace {

// A subcommand whose one positional argument is a run directory.
CLI::App* add_run_dir_command(CLI::App& app, const std::string& name,
                              const std::string& description, RunDirArgs& args) {
  auto* cmd = app.add_subcommand(name, description);
  cmd->add_option("run_dir", args.dir, "A run directory, e.g. runs/fmnist-sync")->required();
  return cmd;
}

}  // namespace

CLI::App* add_checkpoints_command(CLI::App& app, RunDirArgs& args) {
  auto* ckpts = add_run_dir_command(
      app, "checkpoints",
      "List a run's checkpoints and verify the latest: every part's size and CRC-32 against its "
      "manifest, and every saved float finite (65 if not, 66 if there is none).",
      args);
  ckpts->add_flag("--fields", args.fields,
                  "Also list every saved field of every part (kind and size)");
  return ckpts;
}

CLI::App* add_report_command(CLI::App& app, RunDirArgs& args) {
  return add_run_dir_command(
      app, "report",
      "Print what a run's records say: steps/s, step-time percentiles, time to the k-th "
      "gradient, drops per worker, staleness, accuracy of theta and EMA. A run without "
      "summary.json (running, paused, killed) is read from its records and marked "
      "INCOMPLETE, with why.",
      args);
}

CLI::App* add_export_command(CLI::App& app, RunDirArgs& args) {
  auto* exporter = add_run_dir_command(
      app, "export",
      "Write a run's records as CSV: steps.csv (one row per update), grads.csv (one row per "
      "gradient received: arrival, accepted, staleness), eval.csv (one row per evaluation); "
      "into RUN_DIR/csv/ unless --out. With --safetensors, its weights for PyTorch instead: "
      "model.safetensors (theta) and model_ema.safetensors (the EMA) in RUN_DIR/export/, "
      "tensors named and shaped as the layer graph in PyTorch's layout, weight norm folded, "
      "batch-norm statistics computed as the evaluation does (it reads the run's data); "
      "scripts/syncopt_torch.py builds the module from the file.",
      args);
  exporter->add_flag("--csv", args.csv, "The records as CSV files (the default)");
  exporter->add_flag("--safetensors", args.safetensors,
                     "The final weights as safetensors files for PyTorch (docs/models.md)");
  exporter->add_option("--out", args.out,
                       "Directory for the files (default RUN_DIR/csv, RUN_DIR/export)");
  return exporter;
}

int run_keys() {
  std::printf("%s", config::key_reference().c_str());
  return 0;
}

namespace {

// The elastic restarts run.json records (launches[].restart, set by
// scripts/run.sh and train.sbatch; docs/design.md §10), one line each; ""
// when none (or no run.json).
std::string restarts_text(const std::filesystem::path& run) {
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(read_file_bytes(run / "run.json"));
  } catch (const std::exception&) {
    return "";
  }
  std::string out;
  for (const auto& l : doc.value("launches", nlohmann::json::array())) {
    const auto r = l.value("restart", nlohmann::json());
    if (!r.is_object()) continue;
    const auto world = r.value("world", nlohmann::json::object());
    const auto reshape = l.value("reshape", nlohmann::json::object());
    char line[512];
    std::snprintf(line, sizeof line,
                  "elastic restart %s of %s by %s: after exit %s at step %s (lost ranks %s), "
                  "resumed at step %s on %s ranks (was %s); ended %s\n",
                  r.value("number", nlohmann::json()).dump().c_str(),
                  r.value("max", nlohmann::json()).dump().c_str(),
                  r.value("by", std::string("?")).c_str(),
                  r.value("after_exit_code", nlohmann::json()).dump().c_str(),
                  r.value("at_step", nlohmann::json()).dump().c_str(),
                  r.value("lost_ranks", nlohmann::json()).dump().c_str(),
                  reshape.value("step", nlohmann::json()).dump().c_str(),
                  world.value("to", nlohmann::json()).dump().c_str(),
                  world.value("from", nlohmann::json()).dump().c_str(),
                  l.value("exit_code", nlohmann::json()).dump().c_str());
    out += line;
  }
  return out;
}

}  // namespace

// A finished run is read from its summary.json; one without (running,
// paused, killed) from its records, and said to be incomplete, with why.
int run_report(const std::string& dir) {
  using namespace syncopt;
  const std::filesystem::path run(dir);
  const bool has_summary = std::filesystem::exists(run / "summary.json");
  if (!has_summary && !std::filesystem::exists(run / "steps.jsonl")) {
    throw MissingInputError("'" + dir +
                            "' holds no records (no summary.json, no steps.jsonl): give a run "
                            "directory, e.g. runs/<name>");
  }
  const rundir::RunState status = rundir::run_status(run);
  const bool torn_ok = !status.complete();
  const bool has_steps = std::filesystem::exists(run / "steps.jsonl");
  const auto evals = std::filesystem::exists(run / "eval.jsonl")
                         ? metrics::read_jsonl(run / "eval.jsonl", torn_ok)
                         : std::vector<nlohmann::json>{};
  metrics::RunAnalysis an;
  std::string launch_id;  // the flight recorder's dumps of this launch
  if (has_summary) {
    nlohmann::json summary;
    try {
      summary = nlohmann::json::parse(read_file_bytes(run / "summary.json"));
    } catch (const std::exception& e) {
      throw DataError((run / "summary.json").string() + ": not JSON (" + e.what() + ")");
    }
    if (summary.is_object() && summary.contains("launch_id") && summary["launch_id"].is_string())
      launch_id = summary["launch_id"].get<std::string>();
    // The records streamed, never held (a simulation's can be gigabytes);
    // a simulation that kept none (sim.records = none) is its summary.
    if (has_steps) {
      an = metrics::analyze_file(run / "steps.jsonl", metrics::run_info_from_summary(summary),
                                 torn_ok);
    } else {
      an.summary = summary;
    }
  } else {
    const auto steps = has_steps ? metrics::read_steps(run / "steps.jsonl", torn_ok)
                                 : std::vector<metrics::StepRecord>{};
    an = metrics::analyze(steps, rundir::partial_run_info(run, steps, evals));
  }
  const std::string why = status.complete() ? "" : status.status + ": " + status.why;
  std::printf("run %s\n%s%s", dir.c_str(), metrics::format_report(an, evals, why).c_str(),
              restarts_text(run).c_str());
  if (const std::string flight = metrics::format_flight(run, launch_id); !flight.empty()) {
    std::printf("\n%s", flight.c_str());
  }
  return 0;
}

// `syncopt export RUN_DIR [--csv] [--safetensors] [--out DIR]`: the records
// as CSV files, the weights as safetensors files.
int run_export(const RunDirArgs& args) {
  using namespace syncopt;
  const std::string& dir = args.dir;
  const std::filesystem::path run(dir);
  if (args.safetensors) {
    for (const auto& f : train::export_safetensors(run, args.out))
      std::printf("%s\n", f.string().c_str());
    if (!args.csv) return 0;
  }
  const std::filesystem::path to = args.out.empty() ? run / "csv" : std::filesystem::path(args.out);
  const rundir::RunState status = rundir::run_status(run);
  if (!status.complete()) {
    std::fprintf(stderr, "syncopt export: %s is incomplete (%s): %s\n", dir.c_str(),
                 status.status.c_str(), status.why.c_str());
  }
  // The torn-last-record rule of `syncopt report`: only an unfinished run
  // may end in a record being written.
  for (const auto& f : metrics::export_csv(run, to, !status.complete())) {
    std::printf("%s\n", f.string().c_str());
  }
  return 0;
}

namespace {

// Counts the non-finite values of every float field below `s`.
std::size_t non_finite(const syncopt::checkpoint::State& s) {
  std::size_t bad = 0;
  for (const auto& name : s.names()) {
    const std::string kind = s.kind_of(name);
    if (kind == "float array") {
      for (const float x : s.get<std::vector<float>>(name)) bad += std::isfinite(x) ? 0 : 1;
    } else if (kind == "f64") {
      bad += std::isfinite(s.get<double>(name)) ? 0 : 1;
    } else if (kind == "child state") {
      bad += non_finite(s.child(name));
    }
  }
  return bad;
}

}  // namespace

// Every field below `s`, one per line: "  part.child.name  kind [count]".
void print_fields(const syncopt::checkpoint::State& s, const std::string& prefix) {
  for (const auto& name : s.names()) {
    const std::string kind = s.kind_of(name);
    if (kind == "child state") {
      print_fields(s.child(name), prefix + name + ".");
      continue;
    }
    std::string size;
    if (kind == "float array") size = std::to_string(s.get<std::vector<float>>(name).size());
    if (kind == "u64 array") size = std::to_string(s.get<std::vector<std::uint64_t>>(name).size());
    if (kind == "i64 array") size = std::to_string(s.get<std::vector<std::int64_t>>(name).size());
    if (kind == "string") size = std::to_string(s.get<std::string>(name).size()) + " bytes";
    std::printf("    %-40s %s%s\n", (prefix + name).c_str(), kind.c_str(),
                size.empty() ? "" : (" [" + size + "]").c_str());
  }
}

namespace {

// The other shapes a checkpoint of layout `l` resumes on (docs/design.md
// §10, "Resuming on another shape"): the same mode, any number of shards
// (PS modes) and of workers that leaves N >= 1 with the same b.
void print_reshapes(const nlohmann::json& l) {
  const int world = l.value("world", 0);
  if (world <= 1) return;  // the local trainer: one rank
  const int shards = l.value("shards", 0);
  const bool evaluator = !l.value("evaluator_rank", nlohmann::json()).is_null();
  const auto b = l.value("b", nlohmann::json());
  const int backups = b.is_number_integer() ? b.get<int>() : 0;
  if (shards == 0) {
    std::printf(
        "or on any other number of ranks >= 2 (allreduce: the replica as saved, every rank's "
        "data continued): mpirun -np K' ... --set run.resume=true --set run.reshape=true\n");
    return;
  }
  // Sync modes keep b, so K' leaves N' = K' - b >= 1; the others need a worker.
  const std::string workers = b.is_number_integer() ? "K' >= " + std::to_string(backups + 1) +
                                                          " workers (N' = K' - " + b.dump() + ")"
                                                    : std::string("K' >= 1 workers");
  std::printf(
      "or on another shape: S' shards (--set cluster.ps=S'), %s%s: mpirun -np S'%s+K' ... "
      "--set run.resume=true --set run.reshape=true; theta, the optimiser state and the EMA "
      "are cut again for S', every worker's data continued\n",
      evaluator ? "the evaluator, " : "", workers.c_str(), evaluator ? "+1" : "");
}

}  // namespace

// `syncopt checkpoints RUN_DIR`: what is saved, and whether the latest loads.
int run_checkpoints(const std::string& dir, bool fields) {
  using namespace syncopt;
  const auto steps = checkpoint::committed_steps(dir);
  const auto latest = checkpoint::latest_step(dir);
  std::printf("%s: %zu committed checkpoint(s)", dir.c_str(), steps.size());
  for (const auto s : steps) std::printf(" %llu", static_cast<unsigned long long>(s));
  std::printf("\n");
  const checkpoint::Checkpoint ck = checkpoint::load_latest(dir);  // 66 none, 65 corrupt
  std::size_t bad = 0, nbytes = 0;
  for (const auto& [part, state] : ck.parts) bad += non_finite(state);
  for (const auto& f : ck.manifest.files) nbytes += f.nbytes;
  std::printf("latest: step %llu, %zu parts, %zu bytes, created %s; sizes and CRC-32 verified\n",
              static_cast<unsigned long long>(*latest), ck.parts.size(), nbytes,
              ck.manifest.created_utc.c_str());
  // What it resumes to: the layout that saved it (the manifest's stamp).
  if (const auto& run = ck.manifest.run; run.is_object() && run.contains("layout")) {
    const auto& l = run["layout"];
    const int world = l.value("world", 0);
    std::printf(
        "saved by %d rank(s), mode %s: %d shard(s), %d worker(s), N %s, b %s; it resumes "
        "with %d rank(s)%s\n",
        world, l.value("mode", std::string("?")).c_str(), l.value("shards", 0),
        l.value("workers", 0), l.value("N", nlohmann::json()).dump().c_str(),
        l.value("b", nlohmann::json()).dump().c_str(), world,
        world > 1 ? (" (mpirun -np " + std::to_string(world) + " ...)").c_str() : "");
    print_reshapes(l);
  }
  for (const auto& [part, state] : ck.parts) {
    std::printf("  %s\n", part.c_str());
    if (fields) print_fields(state, part + ".");
  }
  if (bad > 0) {
    throw DataError(dir + ": the latest checkpoint holds " + std::to_string(bad) +
                    " non-finite values");
  }
  std::printf("every saved float is finite\n");
  return 0;
}

}  // namespace syncopt::app
