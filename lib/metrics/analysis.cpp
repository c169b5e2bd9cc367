// Record analysis and the report (see analysis.hpp).
#include "metrics/analysis.hpp"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "common/error.hpp"
#include "metrics/blame.hpp"
#include "metrics/limits.hpp"
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

double max_of(const std::vector<double>& v) {
  return v.empty() ? 0.0 : *std::max_element(v.begin(), v.end());
}

// percentile() of float samples, in place (no copy of millions of them).
double percentile_in_place(std::vector<float>& v, double p) {
  if (v.empty()) return 0.0;
  const double pos = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(v.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(lo), v.end());
  const double a = v[lo];
  const double b = lo + 1 < v.size()
                       ? *std::min_element(v.begin() + static_cast<std::ptrdiff_t>(lo) + 1, v.end())
                       : a;
  const double frac = pos - static_cast<double>(lo);
  return a * (1.0 - frac) + b * frac;
}

json histogram_json(const std::map<std::int64_t, std::int64_t>& h) {
  json out = json::object();
  for (const auto& [s, c] : h) out[std::to_string(s)] = c;
  return out;
}

constexpr std::uint64_t kNoVersion = ~std::uint64_t{0};

}  // namespace

// What the summary needs, kept as the records stream by:
//   timing     shard 0: the time of every step (from the last update, the
//              first from its start), every gradient's compute time, every
//              update's aggregation + optimiser time (t_apply - t_start -
//              its last accepted arrival), the span;
//   k-th       versioned modes: the arrivals of each version at shard 0
//              (fresh and, later, dropped ones), from its start; a version
//              is folded into the per-k lists, in version order, once every
//              worker has sent a gradient of a later version (a worker's
//              versions never go back), the rest at the end;
//   counts     drops and acceptances per worker (shard 0, all shards), the
//              staleness histograms and the applied staleness; a gradient's
//              (worker, seq) decisions until every recorded shard had it.
struct Analyzer::State {
  RunInfo info;
  int K = 1;
  bool versioned = false;
  std::string clock;
  bool any = false;
  // timing
  std::uint64_t shard0_steps = 0, last_step = 0;
  bool out_of_order = false;
  double prev_apply = -1.0, first_start = 0.0, last_apply = 0.0;
  std::vector<double> step, apply;
  std::vector<float> compute;
  // k-th
  std::map<std::uint64_t, double> start_of_version;
  std::map<std::uint64_t, std::vector<double>> open;  // version -> arrivals
  std::vector<std::uint64_t> newest;                  // per worker: newest version sent
  std::vector<std::vector<float>> kth;                // [k]: the k-th arrival of each version
  std::vector<double> kth_sum;
  // counts
  std::vector<std::int64_t> drops0, drops_all, accepted0;
  // allreduce with micro-batches: examples each rank did not compute
  std::vector<std::int64_t> skipped;
  bool micro = false;
  std::unique_ptr<Blame> blame;    // the slow rank named, from the phases
  std::unique_ptr<Limits> limits;  // how far from the limit
  std::map<std::int64_t, std::int64_t> hist_applied, hist_all;
  double staleness_sum = 0.0, staleness_max = 0.0;
  std::uint64_t wire_bytes = 0;  // every shard's records
  std::int64_t applied = 0;
  bool track_disagreements = false;
  int record_shards = 1;
  std::map<std::pair<int, std::uint64_t>, std::pair<std::uint8_t, int>> decisions;
  std::int64_t disagreements = 0;
  // Async with per-bucket apply: every applied gradient's staleness per
  // (shard, bucket), bucket 0 (the slice's first layers) first.
  struct LayerStaleness {
    double sum = 0.0, max = 0.0;
    std::int64_t samples = 0;
  };
  std::map<std::pair<int, std::size_t>, LayerStaleness> layers;

  // null when no record had any (sync, or one bucket per shard).
  json layers_json() const {
    if (layers.empty()) return nullptr;
    json out = json::array();
    for (const auto& [key, l] : layers) {
      const auto shard = static_cast<std::size_t>(key.first);
      json e = {{"shard", key.first},
                {"bucket", key.second},
                {"mean", l.sum / static_cast<double>(l.samples)},
                {"max", l.max},
                {"samples", l.samples}};
      if (shard < info.bucket_layers.size() && key.second < info.bucket_layers[shard].size()) {
        e["layers"] = info.bucket_layers[shard][key.second];
      }
      out.push_back(std::move(e));
    }
    return out;
  }

  void close_version(std::vector<double>& times) {
    std::sort(times.begin(), times.end());
    for (std::size_t k = 0; k < times.size() && k < kth.size(); ++k) {
      kth[k].push_back(static_cast<float>(times[k]));
      kth_sum[k] += times[k];
    }
  }
  // Folds every version older than what each worker has moved on to.
  void close_old() {
    std::uint64_t frontier = kNoVersion;
    for (const auto v : newest) frontier = std::min(frontier, v);
    if (frontier == kNoVersion) return;  // a worker has sent nothing yet
    while (!open.empty() && open.begin()->first < frontier) {
      close_version(open.begin()->second);
      open.erase(open.begin());
    }
    // Starts of versions no gradient can refer to any more.
    while (!start_of_version.empty() && start_of_version.begin()->first < frontier) {
      start_of_version.erase(start_of_version.begin());
    }
  }
};

Analyzer::Analyzer(const RunInfo& info) : m(std::make_unique<State>()) {
  m->info = info;
  m->K = std::max(1, info.workers);
  m->versioned = config::traits(info.mode).versioned;
  const auto K = static_cast<std::size_t>(m->K);
  m->newest.assign(K, kNoVersion);
  m->kth.assign(m->versioned ? K : 0, {});
  m->blame = std::make_unique<Blame>(m->K);
  m->limits = std::make_unique<Limits>(m->info);
  m->kth_sum.assign(m->kth.size(), 0.0);
  m->drops0.assign(K, 0);
  m->drops_all = m->accepted0 = m->drops0;
  m->record_shards = info.recorded_shards > 0 ? info.recorded_shards : info.shards;
  // One shard cannot disagree with itself; shard 0's records alone cannot tell.
  m->track_disagreements = info.shards > 1 && m->record_shards > 1;
}

Analyzer::~Analyzer() = default;

bool Analyzer::out_of_order() const { return m->out_of_order; }

RunInfo& Analyzer::info() { return m->info; }

void Analyzer::add(const StepRecord& r) {
  State& st = *m;
  if (!st.any) st.clock = r.clock;
  st.any = true;
  st.wire_bytes += r.wire_bytes;
  st.limits->add(r);
  if (r.shard == 0) {
    st.blame->add(r);
    if (st.shard0_steps > 0 && r.step < st.last_step) st.out_of_order = true;
    if (st.shard0_steps == 0) st.first_start = r.t_start;
    ++st.shard0_steps;
    st.last_step = r.step;
    st.last_apply = r.t_apply;
    st.step.push_back(r.t_apply - (st.prev_apply < 0.0 ? r.t_start : st.prev_apply));
    st.prev_apply = r.t_apply;
    if (st.versioned) st.start_of_version[r.version] = r.t_start;
    double last_accepted = -1.0;
    for (const auto& g : r.grads) {
      st.compute.push_back(static_cast<float>(g.compute_s));
      if (g.accepted) last_accepted = std::max(last_accepted, g.arrival_s);
      if (!st.versioned) continue;
      const auto it = st.start_of_version.find(g.version);
      if (it != st.start_of_version.end()) {
        st.open[g.version].push_back(r.t_start + g.arrival_s - it->second);
      }
      if (g.worker >= 0 && g.worker < st.K) {
        auto& n = st.newest[static_cast<std::size_t>(g.worker)];
        n = n == kNoVersion ? g.version : std::max(n, g.version);
      }
    }
    // From the last gradient used to the update being done: aggregation and
    // the optimiser (and, at shard 0 without an evaluator, nothing else).
    if (last_accepted >= 0.0) st.apply.push_back(r.t_apply - r.t_start - last_accepted);
    if (st.versioned) st.close_old();
  }
  for (const auto& g : r.grads) {
    if (g.worker >= 0 && g.worker < st.K) {
      const auto w = static_cast<std::size_t>(g.worker);
      if (g.examples > 0 && r.shard == 0) {
        st.micro = true;
        st.skipped.resize(static_cast<std::size_t>(st.K), 0);
        st.skipped[w] += g.skipped;
      }
      if (!g.accepted) {
        ++st.drops_all[w];
        if (r.shard == 0) ++st.drops0[w];
      } else if (r.shard == 0) {
        ++st.accepted0[w];
      }
    }
    ++st.hist_all[g.staleness];
    if (g.accepted) {
      for (std::size_t b = 0; b < g.layer_staleness.size(); ++b) {
        auto& l = st.layers[{r.shard, b}];
        const auto v = static_cast<double>(g.layer_staleness[b]);
        l.max = l.samples == 0 ? v : std::max(l.max, v);
        l.sum += v;
        ++l.samples;
      }
      ++st.hist_applied[g.staleness];
      st.staleness_sum += static_cast<double>(g.staleness);
      st.staleness_max = st.applied == 0
                             ? static_cast<double>(g.staleness)
                             : std::max(st.staleness_max, static_cast<double>(g.staleness));
      ++st.applied;
    }
    if (st.track_disagreements) {
      const auto key = std::make_pair(g.worker, g.seq);
      auto& d = st.decisions[key];
      d.first |= g.accepted ? 1 : 2;
      if (++d.second >= st.record_shards) {
        st.disagreements += d.first == 3 ? 1 : 0;
        st.decisions.erase(key);
      }
    }
  }
}

RunAnalysis Analyzer::finish() {
  State& st = *m;
  const RunInfo& info = st.info;
  for (auto& [v, times] : st.open) st.close_version(times);
  st.open.clear();
  for (const auto& [key, d] : st.decisions) st.disagreements += d.first == 3 ? 1 : 0;
  st.decisions.clear();
  json kth_mean = json::array(), kth_median = json::array(), kth_count = json::array();
  for (std::size_t k = 0; k < static_cast<std::size_t>(st.K); ++k) {
    if (k >= st.kth.size()) {
      kth_mean.push_back(0.0);
      kth_median.push_back(0.0);
      kth_count.push_back(0);
      continue;
    }
    const std::size_t n = st.kth[k].size();
    kth_mean.push_back(n > 0 ? st.kth_sum[k] / static_cast<double>(n) : 0.0);
    kth_median.push_back(percentile_in_place(st.kth[k], 50));
    kth_count.push_back(n);
  }
  const double span = st.shard0_steps > 0 ? st.last_apply - st.first_start : 0.0;
  const auto steps = st.shard0_steps;

  RunAnalysis an;
  an.summary = {
      {"mode", config::mode_name(info.mode)},
      {"N", info.n},
      {"b", info.b},
      {"S", info.shards},
      {"workers", info.workers},
      {"batch", info.batch},
      {"steps", steps},
      {"wall_s", info.wall_s},
      {"examples", info.examples},
      {"epochs", info.epochs},
      // Rates over the training itself (first step's start to last update),
      // not the wall time, which also holds start-up and a worker finishing
      // its last step after the end: the rates agree with each other.
      {"train_s", span},
      {"examples_per_s", span > 0 ? static_cast<double>(info.examples) / span : 0.0},
      {"steps_per_s", span > 0 ? static_cast<double>(steps) / span : 0.0},
      {"step_time_p50_s", percentile(st.step, 50)},
      {"step_time_p90_s", percentile(st.step, 90)},
      {"step_time_max_s", max_of(st.step)},
      {"compute_time_p50_s", percentile_in_place(st.compute, 50)},
      {"apply_time_p50_s", percentile(st.apply, 50)},
      {"drops_per_worker", st.drops0},
      {"drops_per_worker_all_shards", st.drops_all},
      {"accepted_per_worker", st.accepted0},
      {"staleness_mean", st.applied > 0 ? st.staleness_sum / static_cast<double>(st.applied) : 0.0},
      {"staleness_max", st.staleness_max},
      {"staleness_hist_applied", histogram_json(st.hist_applied)},
      {"staleness_hist_all", histogram_json(st.hist_all)},
      {"staleness_by_layer", st.layers_json()},
      {"time_to_kth_mean_s", kth_mean},
      {"time_to_kth_median_s", kth_median},
      {"time_to_kth_samples", kth_count}};
  // Unknown when only shard 0's records were kept: null, never a 0.
  an.summary["cross_shard_disagreements"] =
      info.shards > 1 && st.record_shards < 2 ? json(nullptr) : json(st.disagreements);
  // Not evaluated: null, never a 0 that reads like a result.
  const auto or_null = [&](double v) { return info.evaluated ? json(v) : json(nullptr); };
  an.summary["test_loss"] = or_null(info.test_loss);
  an.summary["test_acc"] = or_null(info.test_acc);
  an.summary["test_loss_ema"] = or_null(info.test_loss_ema);
  an.summary["test_acc_ema"] = or_null(info.test_acc_ema);
  // Which time axis the records' times are on (wall, virtual, simulated).
  an.summary["clock"] = st.any && !st.clock.empty() ? st.clock : "wall";
  // Gradient and parameter payloads between workers and shards, per update
  // (all shards together): null where nothing was measured (allreduce,
  // local, a simulation) or not every shard's records were kept.
  const bool measured = st.wire_bytes > 0 && !(info.shards > 1 && st.record_shards < 2);
  an.summary["exchange_bytes_per_update"] =
      measured && steps > 0 ? json(static_cast<double>(st.wire_bytes) / static_cast<double>(steps))
                            : json(nullptr);
  an.summary["exchange_wire"] = info.wire.empty() ? json(nullptr) : json(info.wire);
  st.blame->put_summary(an.summary);
  st.limits->put_summary(an.summary);
  // allreduce with micro-batches (a compute budget): the examples of each
  // rank's batches that were not computed; null otherwise.
  std::int64_t skipped = 0;
  for (const auto v : st.skipped) skipped += v;
  an.summary["skipped_examples_per_worker"] = st.micro ? json(st.skipped) : json(nullptr);
  an.summary["skipped_examples"] = st.micro ? json(skipped) : json(nullptr);
  return an;
}

RunAnalysis analyze(const std::vector<StepRecord>& steps, const RunInfo& info) {
  std::vector<const StepRecord*> shard0, others;
  for (const auto& r : steps) (r.shard == 0 ? shard0 : others).push_back(&r);
  std::stable_sort(shard0.begin(), shard0.end(),
                   [](const StepRecord* a, const StepRecord* b) { return a->step < b->step; });
  Analyzer a(info);
  for (const StepRecord* r : shard0) a.add(*r);
  for (const StepRecord* r : others) a.add(*r);
  return a.finish();
}

RunAnalysis analyze_file(const std::filesystem::path& path, const RunInfo& info,
                         bool torn_tail_ok) {
  std::ifstream in(path);
  if (!in) throw MissingInputError("cannot read '" + path.string() + "': no such file");
  Analyzer a(info);
  std::string line;
  std::int64_t lineno = 0, records = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    json j;
    try {
      j = json::parse(line);
    } catch (const std::exception& e) {
      if (torn_tail_ok && in.eof()) break;  // a torn last record
      throw DataError(path.string() + ":" + std::to_string(lineno) + ": not a JSON record (" +
                      e.what() + ")");
    }
    a.add(step_from_json(j, path.string() + ": record " + std::to_string(++records)));
    if (a.out_of_order()) return analyze(read_steps(path, torn_tail_ok), info);
  }
  return a.finish();
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
  RunAnalysis an = analyze_file(run_dir / "steps.jsonl", info);
  for (const auto& [k, v] : extra.items()) an.summary[k] = v;
  write_file_atomic(run_dir / "summary.json", json_text(an.summary, 2) + "\n");
  return an;
}

namespace {
RunInfo run_info_fields(const json& s);  // below
}  // namespace

RunInfo run_info_from_summary(const json& s) {
  // A summary.json edited by hand or damaged: 65 naming it, not a json
  // exception (an internal error) from a field of the wrong type.
  if (!s.is_object()) {
    throw DataError(std::string("summary.json: not a JSON object (") + s.type_name() +
                    "): not a syncopt summary");
  }
  try {
    return run_info_fields(s);
  } catch (const json::exception& e) {
    throw DataError(std::string("summary.json: a field has the wrong type (") + e.what() +
                    "): not a syncopt summary, or edited by hand");
  }
}

namespace {

RunInfo run_info_fields(const json& s) {
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
  // A simulation that kept shard 0's records alone says so.
  if (const auto sim = s.find("sim");
      sim != s.end() && sim->is_object() && sim->value("records", std::string()) == "shard0") {
    i.recorded_shards = 1;
  }
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
  i.wire =
      s.value("exchange_wire", json()).is_string() ? s["exchange_wire"].get<std::string>() : "";
  i.flops_per_example = number("model_flops_per_example");
  i.param_count = static_cast<std::int64_t>(number("param_count"));
  if (const auto c = s.find("shard_param_counts"); c != s.end() && c->is_array())
    i.shard_counts = c->get<std::vector<std::int64_t>>();
  if (const auto m = s.find("machine"); m != s.end() && m->is_object()) i.machine = *m;
  return i;
}

// printf into the report, a line of at most 255 characters a call.
__attribute__((format(printf, 2, 3))) void put(std::ostream& os, const char* format, ...) {
  char buf[256];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buf, sizeof(buf), format, args);
  va_end(args);
  os << buf;
}

// What ran, how fast, and how long a step took.
void put_run(std::ostream& os, const json& s, const std::string& incomplete) {
  if (!incomplete.empty()) os << "INCOMPLETE: " << incomplete << "\n";
  put(os, "mode %s   N = %d   b = %d   shards = %d   workers = %d   batch %lld\n",
      s["mode"].get<std::string>().c_str(), s["N"].get<int>(), s["b"].get<int>(), s["S"].get<int>(),
      s["workers"].get<int>(), static_cast<long long>(s["batch"].get<std::int64_t>()));
  const double epochs = s["epochs"].get<double>();
  char epochs_text[48] = "epochs unknown";
  if (epochs >= 0.0) std::snprintf(epochs_text, sizeof(epochs_text), "%.2f epochs", epochs);
  put(os, "updates %zu in %.1fs: %.2f steps/s, %.0f examples/s (%s)\n",
      s["steps"].get<std::size_t>(), s["wall_s"].get<double>(), s["steps_per_s"].get<double>(),
      s["examples_per_s"].get<double>(), epochs_text);
  put(os,
      "step time (s): p50 %.4f  p90 %.4f  max %.4f   worker compute p50 %.4f   "
      "aggregate+apply p50 %.4f\n",
      s["step_time_p50_s"].get<double>(), s["step_time_p90_s"].get<double>(),
      s["step_time_max_s"].get<double>(), s["compute_time_p50_s"].get<double>(),
      s.value("apply_time_p50_s", 0.0));
}

// The paper's Figure 3 as a table, when any step has its times.
void put_time_to_kth(std::ostream& os, const json& s) {
  const auto& mean = s["time_to_kth_mean_s"];
  const auto& med = s["time_to_kth_median_s"];
  const auto& cnt = s["time_to_kth_samples"];
  bool any_kth = false;
  for (const auto& c : cnt) any_kth = any_kth || c.get<std::size_t>() > 0;
  if (!any_kth) return;
  os << "time to the k-th gradient of a step (s), from the step's start:\n";
  os << "     k      mean    median   steps\n";
  for (std::size_t k = 0; k < mean.size(); ++k) {
    put(os, "  %4zu  %8.4f  %8.4f  %6zu\n", k + 1, mean[k].get<double>(), med[k].get<double>(),
        cnt[k].get<std::size_t>());
  }
}

// Accepted and dropped gradients per worker (and, with a compute budget, the
// examples each did not compute), and what the shards disagreed on.
void put_workers(std::ostream& os, const json& s) {
  const auto& skipped = s.value("skipped_examples_per_worker", json(nullptr));
  os << "per worker (shard 0):   accepted   dropped"
     << (skipped.is_array() ? "   examples not computed\n" : "\n");
  const auto& acc = s["accepted_per_worker"];
  const auto& drops = s["drops_per_worker"];
  for (std::size_t w = 0; w < drops.size(); ++w) {
    put(os, "  worker %-4zu          %8lld  %8lld", w,
        static_cast<long long>(acc[w].get<std::int64_t>()),
        static_cast<long long>(drops[w].get<std::int64_t>()));
    if (skipped.is_array() && w < skipped.size()) {
      put(os, "  %22lld", static_cast<long long>(skipped[w].get<std::int64_t>()));
    }
    os << "\n";
  }
  if (s["S"].get<int>() > 1) {
    const auto& d = s["cross_shard_disagreements"];
    os << "gradients accepted by one shard and dropped by another: "
       << (d.is_number() ? std::to_string(d.get<std::int64_t>())
                         : std::string("unknown (only shard 0's records were kept)"))
       << "\n";
  }
}

// Staleness: of the applied gradients, the histogram of all, and per bucket.
void put_staleness(std::ostream& os, const json& s) {
  put(os, "staleness of applied gradients: mean %.2f  max %.0f\n",
      s["staleness_mean"].get<double>(), s["staleness_max"].get<double>());
  os << "staleness histogram (all gradients received):";
  // JSON keeps the keys as text ("10" before "2"): print them in number order.
  std::vector<std::pair<long long, std::int64_t>> hist;
  for (const auto& [k, v] : s["staleness_hist_all"].items()) {
    hist.emplace_back(std::stoll(k), v.get<std::int64_t>());
  }
  std::sort(hist.begin(), hist.end());
  for (const auto& [k, v] : hist) os << "  " << k << ":" << v;
  os << "\n";
  const auto it = s.find("staleness_by_layer");
  if (it == s.end() || !it->is_array()) return;
  os << "staleness by layer (each bucket applied on arrival; bucket 0 holds a shard's first "
        "layers):\n  shard  bucket      mean   max  layers\n";
  for (const auto& e : *it) {
    put(os, "  %5d  %6d  %8.2f  %4.0f  %s\n", e["shard"].get<int>(), e["bucket"].get<int>(),
        e["mean"].get<double>(), e["max"].get<double>(), e.value("layers", std::string()).c_str());
  }
}

// Test accuracy over the run and at its end.
void put_accuracy(std::ostream& os, const json& s, const std::vector<json>& evals,
                  const std::string& incomplete) {
  if (!evals.empty()) {
    os << "test accuracy over the run:\n      step    wall_s   theta    EMA\n";
    for (const auto& e : evals) {
      put(os, "  %8llu  %8.1f  %6.2f%%  %6.2f%%\n",
          static_cast<unsigned long long>(e["step"].get<std::uint64_t>()),
          e["wall_s"].get<double>(), 100 * e["test_acc"].get<double>(),
          100 * e["test_acc_ema"].get<double>());
    }
  }
  if (s["test_acc"].is_number()) {
    put(os, "final test accuracy: theta %.2f%%   EMA %.2f%%   (test loss %.4f)\n",
        100 * s["test_acc"].get<double>(), 100 * s["test_acc_ema"].get<double>(),
        s["test_loss"].get<double>());
    return;
  }
  os << "final test accuracy: not evaluated"
     << (!incomplete.empty()                   ? " (the run did not complete)"
         : s.value("clock", "") == "simulated" ? " (a simulation trains nothing)"
                                               : "")
     << "\n";
}

}  // namespace

std::string format_report(const RunAnalysis& an, const std::vector<json>& evals,
                          const std::string& incomplete) {
  const json& s = an.summary;
  std::ostringstream os;
  put_run(os, s, incomplete);
  put_time_to_kth(os, s);
  put_workers(os, s);
  os << format_blame(s);
  os << format_limits(s);
  put_staleness(os, s);
  put_accuracy(os, s, evals, incomplete);
  return os.str();
}

}  // namespace syncopt::metrics
