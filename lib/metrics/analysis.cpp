// Record analysis and the report (see analysis.hpp).
#include "metrics/analysis.hpp"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "common/error.hpp"
#include "metrics/records.hpp"

namespace syncopt::metrics {

using nlohmann::json;

std::vector<json> read_jsonl(const std::filesystem::path& path, bool torn_tail_ok) {
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
      // getline at the end of the file without a newline: a torn record.
      if (torn_tail_ok && in.eof()) break;
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

namespace {

// Step times at shard 0 (between consecutive updates), worker compute times,
// and the aggregation + optimiser time of each update.
struct Timing {
  std::vector<double> step, compute, apply;
  std::map<std::uint64_t, double> start_of_version;
  double span = 0.0;  // first start to last update
};

Timing timing(const std::vector<const StepRecord*>& shard0) {
  Timing t;
  double prev_apply = -1.0;
  for (const StepRecord* r : shard0) {
    t.step.push_back(r->t_apply - (prev_apply < 0.0 ? r->t_start : prev_apply));
    prev_apply = r->t_apply;
    t.start_of_version[r->version] = r->t_start;
    double last_accepted = -1.0;
    for (const auto& g : r->grads) {
      t.compute.push_back(g.compute_s);
      if (g.accepted) last_accepted = std::max(last_accepted, g.arrival_s);
    }
    // From the last gradient used to the update being done: aggregation and
    // the optimiser (and, at shard 0 without an evaluator, nothing else).
    if (last_accepted >= 0.0) t.apply.push_back(r->t_apply - r->t_start - last_accepted);
  }
  if (!shard0.empty()) t.span = shard0.back()->t_apply - shard0.front()->t_start;
  return t;
}

// Time to the k-th gradient computed on a version, from that version's
// start (the paper's Figure 3): fresh gradients of later records (dropped
// as late) count too. Only in versioned modes, where a version has a start.
std::vector<std::vector<double>> kth_arrivals(const std::vector<const StepRecord*>& shard0,
                                              const Timing& t, int workers) {
  std::map<std::uint64_t, std::vector<double>> arrivals;
  for (const StepRecord* r : shard0) {
    for (const auto& g : r->grads) {
      const auto it = t.start_of_version.find(g.version);
      if (it == t.start_of_version.end()) continue;
      arrivals[g.version].push_back(r->t_start + g.arrival_s - it->second);
    }
  }
  std::vector<std::vector<double>> kth(static_cast<std::size_t>(workers));
  for (auto& [v, times] : arrivals) {
    std::sort(times.begin(), times.end());
    for (std::size_t k = 0; k < times.size() && k < kth.size(); ++k) kth[k].push_back(times[k]);
  }
  return kth;
}

// Drops, acceptances, staleness and cross-shard agreement over every
// shard's records.
struct Counts {
  std::vector<std::int64_t> drops0, drops_all, accepted0;
  std::map<std::int64_t, std::int64_t> hist_applied, hist_all;
  std::vector<double> applied_staleness;
  std::int64_t disagreements = 0;
};

Counts counts(const std::vector<StepRecord>& steps, int workers, int shards) {
  Counts c;
  c.drops0.assign(static_cast<std::size_t>(workers), 0);
  c.drops_all = c.accepted0 = c.drops0;
  // (worker, seq) -> 1: accepted by some shard, 2: dropped by some shard.
  // Only with several shards: one shard cannot disagree with itself, and at
  // millions of gradients (syncopt simulate) the map is most of the cost.
  std::map<std::pair<int, std::uint64_t>, std::uint8_t> decisions;
  for (const auto& r : steps) {
    for (const auto& g : r.grads) {
      if (g.worker >= 0 && g.worker < workers) {
        const auto w = static_cast<std::size_t>(g.worker);
        if (!g.accepted) {
          ++c.drops_all[w];
          if (r.shard == 0) ++c.drops0[w];
        } else if (r.shard == 0) {
          ++c.accepted0[w];
        }
      }
      ++c.hist_all[g.staleness];
      if (g.accepted) {
        ++c.hist_applied[g.staleness];
        c.applied_staleness.push_back(static_cast<double>(g.staleness));
      }
      if (shards > 1) decisions[{g.worker, g.seq}] |= g.accepted ? 1 : 2;
    }
  }
  if (shards > 1) {
    for (const auto& [key, seen] : decisions) c.disagreements += seen == 3 ? 1 : 0;
  }
  return c;
}

double max_of(const std::vector<double>& v) {
  return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
}

// Async with per-bucket apply: every applied gradient's staleness per
// bucket, per shard, bucket 0 (the slice's first layers) first; null when
// no record has any (sync, or one bucket per shard).
json staleness_by_layer(const std::vector<StepRecord>& steps, const RunInfo& info) {
  std::map<std::pair<int, std::size_t>, std::vector<double>> per;
  for (const auto& r : steps) {
    for (const auto& g : r.grads) {
      if (!g.accepted) continue;
      for (std::size_t b = 0; b < g.layer_staleness.size(); ++b) {
        per[{r.shard, b}].push_back(static_cast<double>(g.layer_staleness[b]));
      }
    }
  }
  if (per.empty()) return nullptr;
  json out = json::array();
  for (const auto& [key, v] : per) {
    const auto shard = static_cast<std::size_t>(key.first);
    json e = {{"shard", key.first},
              {"bucket", key.second},
              {"mean", mean_of(v)},
              {"max", max_of(v)},
              {"samples", v.size()}};
    if (shard < info.bucket_layers.size() && key.second < info.bucket_layers[shard].size()) {
      e["layers"] = info.bucket_layers[shard][key.second];
    }
    out.push_back(std::move(e));
  }
  return out;
}

json histogram_json(const std::map<std::int64_t, std::int64_t>& h) {
  json out = json::object();
  for (const auto& [s, c] : h) out[std::to_string(s)] = c;
  return out;
}

}  // namespace

RunAnalysis analyze(const std::vector<StepRecord>& steps, const RunInfo& info) {
  const int K = std::max(1, info.workers);
  std::vector<const StepRecord*> shard0;
  for (const auto& r : steps) {
    if (r.shard == 0) shard0.push_back(&r);
  }
  std::sort(shard0.begin(), shard0.end(),
            [](const StepRecord* a, const StepRecord* b) { return a->step < b->step; });
  const Timing t = timing(shard0);
  const auto kth = config::traits(info.mode).versioned
                       ? kth_arrivals(shard0, t, K)
                       : std::vector<std::vector<double>>(static_cast<std::size_t>(K));
  json kth_mean = json::array(), kth_median = json::array(), kth_count = json::array();
  for (const auto& v : kth) {
    kth_mean.push_back(mean_of(v));
    kth_median.push_back(percentile(v, 50));
    kth_count.push_back(v.size());
  }
  const Counts c = counts(steps, K, info.shards);

  RunAnalysis an;
  an.summary = {{"mode", config::mode_name(info.mode)},
                {"N", info.n},
                {"b", info.b},
                {"S", info.shards},
                {"workers", info.workers},
                {"batch", info.batch},
                {"steps", shard0.size()},
                {"wall_s", info.wall_s},
                {"examples", info.examples},
                {"epochs", info.epochs},
                // Rates over the training itself (first step's start to last update),
                // not the wall time, which also holds start-up and a worker finishing
                // its last step after the end: the rates agree with each other.
                {"train_s", t.span},
                {"examples_per_s", t.span > 0 ? static_cast<double>(info.examples) / t.span : 0.0},
                {"steps_per_s", t.span > 0 ? static_cast<double>(shard0.size()) / t.span : 0.0},
                {"step_time_p50_s", percentile(t.step, 50)},
                {"step_time_p90_s", percentile(t.step, 90)},
                {"step_time_max_s", max_of(t.step)},
                {"compute_time_p50_s", percentile(t.compute, 50)},
                {"apply_time_p50_s", percentile(t.apply, 50)},
                {"drops_per_worker", c.drops0},
                {"drops_per_worker_all_shards", c.drops_all},
                {"accepted_per_worker", c.accepted0},
                {"staleness_mean", mean_of(c.applied_staleness)},
                {"staleness_max", max_of(c.applied_staleness)},
                {"staleness_hist_applied", histogram_json(c.hist_applied)},
                {"staleness_hist_all", histogram_json(c.hist_all)},
                {"staleness_by_layer", staleness_by_layer(steps, info)},
                {"time_to_kth_mean_s", kth_mean},
                {"time_to_kth_median_s", kth_median},
                {"time_to_kth_samples", kth_count},
                {"cross_shard_disagreements", c.disagreements}};
  // Not evaluated: null, never a 0 that reads like a result.
  const auto or_null = [&](double v) { return info.evaluated ? json(v) : json(nullptr); };
  an.summary["test_loss"] = or_null(info.test_loss);
  an.summary["test_acc"] = or_null(info.test_acc);
  an.summary["test_loss_ema"] = or_null(info.test_loss_ema);
  an.summary["test_acc_ema"] = or_null(info.test_acc_ema);
  // Which time axis the records' times are on (wall, virtual, simulated).
  an.summary["clock"] =
      !steps.empty() && !steps.front().clock.empty() ? steps.front().clock : "wall";
  return an;
}

std::vector<StepRecord> read_steps(const std::filesystem::path& path, bool torn_tail_ok) {
  const auto lines = read_jsonl(path, torn_tail_ok);
  std::vector<StepRecord> out;
  out.reserve(lines.size());
  for (std::size_t i = 0; i < lines.size(); ++i) {
    out.push_back(step_from_json(lines[i], path.string() + ": record " + std::to_string(i + 1)));
  }
  return out;
}

RunAnalysis write_summary(const std::filesystem::path& run_dir, const RunInfo& info,
                          const json& extra) {
  RunAnalysis an = analyze(read_steps(run_dir / "steps.jsonl"), info);
  for (const auto& [k, v] : extra.items()) an.summary[k] = v;
  write_file_atomic(run_dir / "summary.json", json_text(an.summary, 2) + "\n");
  return an;
}

RunInfo run_info_from_summary(const json& s) {
  RunInfo i;
  const std::string mode = s.value("mode", std::string("local"));
  const auto parsed = config::enum_from_name<config::Mode>(mode);
  if (!parsed) throw DataError("summary.json: unknown mode \"" + mode + "\"");
  i.mode = *parsed;
  i.n = s.value("N", 1);
  i.b = s.value("b", 0);
  i.shards = s.value("S", 0);
  i.workers = s.value("workers", 1);
  i.batch = s.value("batch", std::int64_t{0});
  i.wall_s = s.value("wall_s", 0.0);
  i.examples = s.value("examples", std::uint64_t{0});
  i.epochs = s.value("epochs", 0.0);
  // Older summaries wrote 0 for a run that was not evaluated; theirs say
  // final_eval "none: ...".
  const auto number = [&](const char* key) {
    const auto it = s.find(key);
    return it != s.end() && it->is_number() ? it->get<double>() : 0.0;
  };
  const auto acc = s.find("test_acc");
  i.evaluated = acc != s.end() && acc->is_number() && !s.contains("final_eval");
  i.test_loss = number("test_loss");
  i.test_acc = number("test_acc");
  i.test_loss_ema = number("test_loss_ema");
  i.test_acc_ema = number("test_acc_ema");
  return i;
}

std::string format_report(const RunAnalysis& an, const std::vector<json>& evals,
                          const std::string& incomplete) {
  const json& s = an.summary;
  std::ostringstream os;
  char buf[256];
  if (!incomplete.empty()) os << "INCOMPLETE: " << incomplete << "\n";
  std::snprintf(
      buf, sizeof(buf), "mode %s   N = %d   b = %d   shards = %d   workers = %d   batch %lld\n",
      s["mode"].get<std::string>().c_str(), s["N"].get<int>(), s["b"].get<int>(), s["S"].get<int>(),
      s["workers"].get<int>(), static_cast<long long>(s["batch"].get<std::int64_t>()));
  os << buf;
  const double epochs = s["epochs"].get<double>();
  char epochs_text[48] = "epochs unknown";
  if (epochs >= 0.0) std::snprintf(epochs_text, sizeof(epochs_text), "%.2f epochs", epochs);
  std::snprintf(buf, sizeof(buf), "updates %zu in %.1fs: %.2f steps/s, %.0f examples/s (%s)\n",
                s["steps"].get<std::size_t>(), s["wall_s"].get<double>(),
                s["steps_per_s"].get<double>(), s["examples_per_s"].get<double>(), epochs_text);
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
  // JSON keeps the keys as text ("10" before "2"): print them in number order.
  std::vector<std::pair<long long, std::int64_t>> hist;
  for (const auto& [k, v] : s["staleness_hist_all"].items()) {
    hist.emplace_back(std::stoll(k), v.get<std::int64_t>());
  }
  std::sort(hist.begin(), hist.end());
  for (const auto& [k, v] : hist) os << "  " << k << ":" << v;
  os << "\n";
  if (const auto it = s.find("staleness_by_layer"); it != s.end() && it->is_array()) {
    os << "staleness by layer (each bucket applied on arrival; bucket 0 holds a shard's first "
          "layers):\n  shard  bucket      mean   max  layers\n";
    for (const auto& e : *it) {
      std::snprintf(buf, sizeof(buf), "  %5d  %6d  %8.2f  %4.0f  %s\n", e["shard"].get<int>(),
                    e["bucket"].get<int>(), e["mean"].get<double>(), e["max"].get<double>(),
                    e.value("layers", std::string()).c_str());
      os << buf;
    }
  }
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
  if (s["test_acc"].is_number()) {
    std::snprintf(buf, sizeof(buf),
                  "final test accuracy: theta %.2f%%   EMA %.2f%%   (test loss %.4f)\n",
                  100 * s["test_acc"].get<double>(), 100 * s["test_acc_ema"].get<double>(),
                  s["test_loss"].get<double>());
    os << buf;
  } else {
    os << "final test accuracy: not evaluated"
       << (!incomplete.empty()                   ? " (the run did not complete)"
           : s.value("clock", "") == "simulated" ? " (a simulation trains nothing)"
                                                 : "")
       << "\n";
  }
  return os.str();
}

}  // namespace syncopt::metrics
