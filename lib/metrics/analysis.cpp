// Record analysis and the report (see analysis.hpp).
#include "metrics/analysis.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "common/error.hpp"
#include "metrics/records.hpp"

namespace syncopt::metrics {

using nlohmann::json;

std::vector<json> read_jsonl(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw MissingInputError("cannot read '" + path.string() + "': no such file");
  std::vector<json> out;
  std::string line;
  std::int64_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    try {
      out.push_back(json::parse(line));
    } catch (const std::exception& e) {
      throw DataError(path.string() + ":" + std::to_string(lineno) + ": not a JSON record (" +
                      e.what() + ")");
    }
  }
  return out;
}

namespace {

double mean_of(const std::vector<double>& v) {
  if (v.empty()) return 0.0;
  double s = 0.0;
  for (double x : v) s += x;
  return s / static_cast<double>(v.size());
}

}  // namespace

RunAnalysis analyze(const std::vector<json>& steps, const RunInfo& info) {
  const int K = std::max(1, info.workers);
  std::vector<const json*> shard0;
  for (const auto& r : steps) {
    if (r.value("shard", 0) == 0) shard0.push_back(&r);
  }
  std::sort(shard0.begin(), shard0.end(),
            [](const json* a, const json* b) { return (*a)["step"] < (*b)["step"]; });

  // Step times at shard 0: between consecutive updates.
  std::vector<double> step_times, compute, apply_times;
  double prev_apply = -1.0;
  std::map<std::uint64_t, double> start_of_version;
  for (const json* r : shard0) {
    const double t_apply = (*r)["t_apply"].get<double>();
    const double t_start = (*r)["t_start"].get<double>();
    step_times.push_back(t_apply - (prev_apply < 0.0 ? t_start : prev_apply));
    prev_apply = t_apply;
    start_of_version[(*r)["version"].get<std::uint64_t>()] = t_start;
    double last_accepted = -1.0;
    for (const auto& g : (*r)["grads"]) {
      if (g.contains("compute_s")) compute.push_back(g["compute_s"].get<double>());
      if (g["accepted"].get<bool>()) {
        last_accepted = std::max(last_accepted, g["arrival_s"].get<double>());
      }
    }
    // From the last gradient used to the update being done: aggregation and
    // the optimiser (and, at shard 0 without an evaluator, nothing else).
    if (last_accepted >= 0.0) apply_times.push_back(t_apply - t_start - last_accepted);
  }

  // Time to the k-th gradient computed on a version, from that version's
  // start: fresh gradients of later records (dropped as late) count too.
  std::map<std::uint64_t, std::vector<double>> arrivals;
  const bool versioned = info.mode != "async" && info.mode != "ssp" && info.mode != "softsync";
  if (versioned) {
    for (const json* r : shard0) {
      const double t_start = (*r)["t_start"].get<double>();
      for (const auto& g : (*r)["grads"]) {
        const auto v = g["version"].get<std::uint64_t>();
        const auto it = start_of_version.find(v);
        if (it == start_of_version.end()) continue;
        arrivals[v].push_back(t_start + g["arrival_s"].get<double>() - it->second);
      }
    }
  }
  std::vector<std::vector<double>> kth(static_cast<std::size_t>(K));
  for (auto& [v, times] : arrivals) {
    std::sort(times.begin(), times.end());
    for (std::size_t k = 0; k < times.size() && k < kth.size(); ++k) kth[k].push_back(times[k]);
  }
  json kth_mean = json::array(), kth_median = json::array(), kth_count = json::array();
  for (const auto& v : kth) {
    kth_mean.push_back(mean_of(v));
    kth_median.push_back(percentile(v, 50));
    kth_count.push_back(v.size());
  }

  // Drops, staleness, cross-shard agreement over every shard's records.
  std::vector<std::int64_t> drops0(static_cast<std::size_t>(K), 0), drops_all(drops0),
      accepted0(drops0);
  std::map<std::int64_t, std::int64_t> hist_applied, hist_all;
  std::vector<double> applied_staleness;
  std::map<std::pair<int, std::uint64_t>, std::set<bool>> decisions;
  bool has_seq = false;
  for (const auto& r : steps) {
    const int shard = r.value("shard", 0);
    for (const auto& g : r["grads"]) {
      const int w = g["worker"].get<int>();
      const bool acc = g["accepted"].get<bool>();
      const auto st = g["staleness"].get<std::int64_t>();
      if (w >= 0 && w < K) {
        if (!acc) {
          ++drops_all[static_cast<std::size_t>(w)];
          if (shard == 0) ++drops0[static_cast<std::size_t>(w)];
        } else if (shard == 0) {
          ++accepted0[static_cast<std::size_t>(w)];
        }
      }
      ++hist_all[st];
      if (acc) {
        ++hist_applied[st];
        applied_staleness.push_back(static_cast<double>(st));
      }
      if (g.contains("seq")) {
        has_seq = true;
        decisions[{w, g["seq"].get<std::uint64_t>()}].insert(acc);
      }
    }
  }
  std::int64_t disagreements = 0;
  if (has_seq && info.shards > 1) {
    for (const auto& [key, set] : decisions) disagreements += set.size() > 1 ? 1 : 0;
  }
  json hist_applied_j = json::object(), hist_all_j = json::object();
  for (const auto& [s, c] : hist_applied) hist_applied_j[std::to_string(s)] = c;
  for (const auto& [s, c] : hist_all) hist_all_j[std::to_string(s)] = c;

  const double span = shard0.empty() ? 0.0
                                     : shard0.back()->at("t_apply").get<double>() -
                                           shard0.front()->at("t_start").get<double>();
  RunAnalysis an;
  an.summary = {
      {"mode", info.mode},
      {"N", info.n},
      {"b", info.b},
      {"S", info.shards},
      {"workers", info.workers},
      {"batch", info.batch},
      {"steps", shard0.size()},
      {"wall_s", info.wall_s},
      {"examples", info.examples},
      {"epochs", info.epochs},
      {"examples_per_s", info.wall_s > 0 ? static_cast<double>(info.examples) / info.wall_s : 0.0},
      {"steps_per_s", span > 0 ? static_cast<double>(shard0.size()) / span : 0.0},
      {"step_time_p50_s", percentile(step_times, 50)},
      {"step_time_p90_s", percentile(step_times, 90)},
      {"step_time_max_s", step_times.empty() ? 0.0 : *std::max_element(step_times.begin(), step_times.end())},
      {"compute_time_p50_s", percentile(compute, 50)},
      {"apply_time_p50_s", percentile(apply_times, 50)},
      {"drops_per_worker", drops0},
      {"drops_per_worker_all_shards", drops_all},
      {"accepted_per_worker", accepted0},
      {"staleness_mean", mean_of(applied_staleness)},
      {"staleness_max", applied_staleness.empty() ? 0.0 : *std::max_element(applied_staleness.begin(), applied_staleness.end())},
      {"staleness_hist_applied", hist_applied_j},
      {"staleness_hist_all", hist_all_j},
      {"time_to_kth_mean_s", kth_mean},
      {"time_to_kth_median_s", kth_median},
      {"time_to_kth_samples", kth_count},
      {"cross_shard_disagreements", disagreements},
      {"test_loss", info.test_loss},
      {"test_acc", info.test_acc},
      {"test_loss_ema", info.test_loss_ema},
      {"test_acc_ema", info.test_acc_ema}};
  return an;
}

RunInfo run_info_from_summary(const json& s) {
  RunInfo i;
  i.mode = s.value("mode", std::string("local"));
  i.n = s.value("N", 1);
  i.b = s.value("b", 0);
  i.shards = s.value("S", 0);
  i.workers = s.value("workers", 1);
  i.batch = s.value("batch", std::int64_t{0});
  i.wall_s = s.value("wall_s", 0.0);
  i.examples = s.value("examples", std::uint64_t{0});
  i.epochs = s.value("epochs", 0.0);
  i.test_loss = s.value("test_loss", 0.0);
  i.test_acc = s.value("test_acc", 0.0);
  i.test_loss_ema = s.value("test_loss_ema", 0.0);
  i.test_acc_ema = s.value("test_acc_ema", 0.0);
  return i;
}

std::string format_report(const RunAnalysis& an, const std::vector<json>& evals) {
  const json& s = an.summary;
  std::ostringstream os;
  char buf[256];
  std::snprintf(buf, sizeof(buf), "mode %s   N = %d   b = %d   shards = %d   workers = %d   batch %lld\n",
                s["mode"].get<std::string>().c_str(), s["N"].get<int>(), s["b"].get<int>(),
                s["S"].get<int>(), s["workers"].get<int>(),
                static_cast<long long>(s["batch"].get<std::int64_t>()));
  os << buf;
  std::snprintf(buf, sizeof(buf),
                "updates %zu in %.1fs: %.2f steps/s, %.0f examples/s (%.2f epochs)\n",
                s["steps"].get<std::size_t>(), s["wall_s"].get<double>(),
                s["steps_per_s"].get<double>(), s["examples_per_s"].get<double>(),
                s["epochs"].get<double>());
  os << buf;
  std::snprintf(buf, sizeof(buf),
                "step time (s): p50 %.4f  p90 %.4f  max %.4f   worker compute p50 %.4f   "
                "aggregate+apply p50 %.4f\n",
                s["step_time_p50_s"].get<double>(), s["step_time_p90_s"].get<double>(),
                s["step_time_max_s"].get<double>(), s["compute_time_p50_s"].get<double>(),
                s.value("apply_time_p50_s", 0.0));
  os << buf;
  const auto& mean = s["time_to_kth_mean_s"];
  const auto& med = s["time_to_kth_median_s"];
  const auto& cnt = s["time_to_kth_samples"];
  bool any_kth = false;
  for (const auto& c : cnt) any_kth = any_kth || c.get<std::size_t>() > 0;
  if (any_kth) {
    os << "time to the k-th gradient of a step (s), from the step's start:\n";
    os << "     k      mean    median   steps\n";
    for (std::size_t k = 0; k < mean.size(); ++k) {
      std::snprintf(buf, sizeof(buf), "  %4zu  %8.4f  %8.4f  %6zu\n", k + 1, mean[k].get<double>(),
                    med[k].get<double>(), cnt[k].get<std::size_t>());
      os << buf;
    }
  }
  os << "per worker (shard 0):   accepted   dropped\n";
  const auto& acc = s["accepted_per_worker"];
  const auto& drops = s["drops_per_worker"];
  for (std::size_t w = 0; w < drops.size(); ++w) {
    std::snprintf(buf, sizeof(buf), "  worker %-4zu          %8lld  %8lld\n", w,
                  static_cast<long long>(acc[w].get<std::int64_t>()),
                  static_cast<long long>(drops[w].get<std::int64_t>()));
    os << buf;
  }
  if (s["S"].get<int>() > 1) {
    os << "gradients accepted by one shard and dropped by another: "
       << s["cross_shard_disagreements"].get<std::int64_t>() << "\n";
  }
  std::snprintf(buf, sizeof(buf), "staleness of applied gradients: mean %.2f  max %.0f\n",
                s["staleness_mean"].get<double>(), s["staleness_max"].get<double>());
  os << buf;
  os << "staleness histogram (all gradients received):";
  for (const auto& [k, v] : s["staleness_hist_all"].items()) os << "  " << k << ":" << v.get<std::int64_t>();
  os << "\n";
  if (!evals.empty()) {
    os << "test accuracy over the run:\n      step    wall_s   theta    EMA\n";
    for (const auto& e : evals) {
      std::snprintf(buf, sizeof(buf), "  %8llu  %8.1f  %6.2f%%  %6.2f%%\n",
                    static_cast<unsigned long long>(e["step"].get<std::uint64_t>()),
                    e["wall_s"].get<double>(), 100 * e["test_acc"].get<double>(),
                    100 * e["test_acc_ema"].get<double>());
      os << buf;
    }
  }
  std::snprintf(buf, sizeof(buf), "final test accuracy: theta %.2f%%   EMA %.2f%%   (test loss %.4f)\n",
                100 * s["test_acc"].get<double>(), 100 * s["test_acc_ema"].get<double>(),
                s["test_loss"].get<double>());
  os << buf;
  return os.str();
}

}  // namespace syncopt::metrics
