// `syncopt report`, `syncopt checkpoints` (see commands.hpp).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "commands.hpp"
#include "common/error.hpp"
#include "metrics/analysis.hpp"

namespace syncopt::app {

int run_report(const std::string& dir) {
  using namespace syncopt;
  const std::filesystem::path run(dir);
  if (!std::filesystem::exists(run / "summary.json")) {
    throw MissingInputError("'" + (run / "summary.json").string() +
                            "' not found: give the directory of a finished run (runs/<name>)");
  }
  std::ifstream in(run / "summary.json");
  nlohmann::json summary;
  try {
    in >> summary;
  } catch (const std::exception& e) {
    throw DataError((run / "summary.json").string() + ": not JSON (" + e.what() + ")");
  }
  const auto steps = metrics::read_steps(run / "steps.jsonl");
  const auto evals = std::filesystem::exists(run / "eval.jsonl")
                         ? metrics::read_jsonl(run / "eval.jsonl")
                         : std::vector<nlohmann::json>{};
  const auto info = metrics::run_info_from_summary(summary);
  const auto an = metrics::analyze(steps, info);
  std::printf("run %s\n%s", dir.c_str(), metrics::format_report(an, evals).c_str());
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

// `syncopt checkpoints RUN_DIR`: what is saved, and whether the latest loads.
int run_checkpoints(const std::string& dir) {
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
  for (const auto& [part, state] : ck.parts) std::printf("  %s\n", part.c_str());
  if (bad > 0) {
    throw DataError(dir + ": the latest checkpoint holds " + std::to_string(bad) +
                    " non-finite values");
  }
  std::printf("every saved float is finite\n");
  return 0;
}

}  // namespace syncopt::app
