// CSV export of a run's records (see export.hpp).
#include "metrics/export.hpp"

#include <set>

#include "common/error.hpp"
#include "metrics/analysis.hpp"
#include "metrics/records.hpp"

namespace syncopt::metrics {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// RFC 4180: a field holding a comma, a quote or a line break is quoted,
// its quotes doubled.
std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

std::string cell(const json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return csv_field(v.get<std::string>());
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  return csv_field(v.dump());
}

}  // namespace

std::string to_csv(const std::vector<json>& rows, const std::vector<std::string>& first) {
  std::vector<std::string> columns;
  std::set<std::string> seen;
  std::set<std::string> rest;
  for (const auto& row : rows) {
    for (const auto& [k, v] : row.items()) rest.insert(k);
  }
  for (const auto& c : first) {
    if (rest.count(c) > 0 && seen.insert(c).second) columns.push_back(c);
  }
  for (const auto& c : rest) {
    if (seen.insert(c).second) columns.push_back(c);
  }
  std::string out;
  for (std::size_t i = 0; i < columns.size(); ++i) {
    if (i) out += ',';
    out += csv_field(columns[i]);
  }
  out += "\n";
  for (const auto& row : rows) {
    for (std::size_t i = 0; i < columns.size(); ++i) {
      if (i) out += ',';
      const auto it = row.find(columns[i]);
      if (it != row.end()) out += cell(*it);
    }
    out += "\n";
  }
  return out;
}

std::vector<fs::path> export_csv(const fs::path& run_dir, const fs::path& out_dir,
                                 bool torn_tail_ok) {
  if (!fs::exists(run_dir / "steps.jsonl")) {
    throw MissingInputError("'" + (run_dir / "steps.jsonl").string() +
                            "' not found: give a run directory (runs/<name>) that has records");
  }
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) {
    throw OutputError(ExitCode::kCantCreate,
                      "cannot create '" + out_dir.string() + "': " + ec.message());
  }
  std::vector<json> steps, grads;
  for (auto& r : read_jsonl(run_dir / "steps.jsonl", torn_tail_ok)) {
    int dropped = 0, count = 0;
    if (r.contains("grads") && r["grads"].is_array()) {
      for (auto g : r["grads"]) {
        ++count;
        dropped += g.value("accepted", true) ? 0 : 1;
        g["step"] = r.value("step", json());
        g["shard"] = r.value("shard", json());
        grads.push_back(std::move(g));
      }
      r.erase("grads");
    }
    r["grads"] = count;
    r["dropped"] = dropped;
    steps.push_back(std::move(r));
  }
  std::vector<fs::path> written;
  const auto put = [&](const char* name, const std::string& text) {
    write_file_atomic(out_dir / name, text);
    written.push_back(out_dir / name);
  };
  put("steps.csv", to_csv(steps, {"step", "shard", "version", "t_start", "t_apply", "lr", "loss",
                                  "used", "grads", "dropped"}));
  put("grads.csv", to_csv(grads, {"step", "shard", "worker", "arrival_s", "version", "accepted",
                                  "staleness", "compute_s", "loss", "seq"}));
  if (fs::exists(run_dir / "eval.jsonl")) {
    put("eval.csv", to_csv(read_jsonl(run_dir / "eval.jsonl", torn_tail_ok),
                           {"step", "wall_s", "examples", "epoch", "test_loss", "test_acc",
                            "test_loss_ema", "test_acc_ema"}));
  }
  return written;
}

}  // namespace syncopt::metrics
