// libFuzzer target: the record readers behind `syncopt report`. The input is
// cut at its first two 0x00 bytes into summary.json, steps.jsonl and
// eval.jsonl of a run directory, which are read and reported as `syncopt
// report` does: the summary parsed and turned back into the run's facts,
// steps.jsonl analysed record by record, eval.jsonl read, the report
// formatted. Any syncopt::Error is an answer (65 and the like, naming the
// file); anything else escaping, a crash or a sanitizer report is a finding.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/error.hpp"
#include "metrics/analysis.hpp"

namespace {

namespace fs = std::filesystem;

fs::path scratch() {
  static const fs::path d = [] {
    fs::path p = fs::temp_directory_path() / ("syncopt-fuzz-records-" + std::to_string(::getpid()));
    fs::create_directories(p);
    return p;
  }();
  return d;
}

// The text up to the next 0x00 (or the end), advancing `at` past it.
std::string piece(const std::string& all, std::size_t& at) {
  const std::size_t end = std::min(all.find('\0', at), all.size());
  std::string out = all.substr(at, end - at);
  at = end < all.size() ? end + 1 : end;
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace syncopt;
  const std::string all(reinterpret_cast<const char*>(data), size);
  std::size_t at = 0;
  const std::string summary_text = piece(all, at);
  const std::string steps_text = piece(all, at);
  const std::string eval_text = all.substr(at);
  const fs::path steps = scratch() / "steps.jsonl", evals = scratch() / "eval.jsonl";
  std::ofstream(steps, std::ios::binary) << steps_text;
  std::ofstream(evals, std::ios::binary) << eval_text;
  try {
    nlohmann::json summary;
    try {
      summary = nlohmann::json::parse(summary_text);
    } catch (const nlohmann::json::exception&) {
      return 0;  // `syncopt report` says "not JSON" (65) before reading more
    }
    const metrics::RunInfo info = metrics::run_info_from_summary(summary);
    const metrics::RunAnalysis an = metrics::analyze_file(steps, info, true);
    const auto ev = metrics::read_jsonl(evals, true);
    (void)metrics::format_report(an, ev, "stopped: fuzz");
    (void)metrics::analyze(metrics::read_steps(steps, true), info);
  } catch (const Error&) {
  }
  return 0;
}
