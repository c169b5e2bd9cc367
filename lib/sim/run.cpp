// The simulate command's run directory (see run.hpp).
#include "sim/run.hpp"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>
#include <vector>

#include "common/error.hpp"
#include "layout/placement.hpp"
#include "layout/roles.hpp"
#include "metrics/analysis.hpp"
#include "metrics/records.hpp"
#include "metrics/run_board.hpp"
#include "metrics/step_record.hpp"
#include "sim/allreduce.hpp"
#include "sim/fit.hpp"

namespace syncopt::sim {

std::int64_t nominal_train_count(const config::Config& cfg) {
  std::int64_t count = 1;  // idx: unused, the run is counted in steps
  switch (cfg.data.name) {
    case config::DataSet::kSynthetic:
      count = cfg.data.synthetic_train;
      break;
    case config::DataSet::kFashionMnist:
      count = 60000;
      break;
    case config::DataSet::kCifar10:
      count = 50000;
      break;
    case config::DataSet::kIdx:
    case config::DataSet::kNpy:
    case config::DataSet::kHdf5:
      if (cfg.train.steps == 0) {
        throw ConfigError("data.name = \"" + config::to_string(cfg.data.name) +
                          "\" with train.steps = 0: syncopt simulate does not read the data "
                          "set, so it cannot count an epoch; set train.steps");
      }
      break;
  }
  return cfg.data.limit_train > 0 ? std::min(count, cfg.data.limit_train) : count;
}

SimSetup make_setup(const config::Config& cfg, std::size_t param_count, const TimingModel& timing,
                    const worker::StragglerModel* stragglers,
                    const std::vector<LayerCost>& layers) {
  const auto mode = cfg.train.mode;
  const auto& t = config::traits(mode);
  if (!t.uses_ps) {
    throw ConfigError("train.mode = \"" + std::string(config::mode_name(mode)) +
                      "\": syncopt simulate models the parameter-server modes (sync, async, "
                      "softsync, ssp, timeout) and allreduce");
  }
  if (t.has_backups && config::is_auto(cfg.train.backups)) {
    throw ConfigError(
        "train.backups = \"auto\": syncopt simulate models a fixed b only (adaptive b decides "
        "from real arrival times); give a number, e.g. --set train.backups=1, or compare fixed "
        "b values with syncopt plan");
  }
  layout::Roles roles;
  roles.mode = mode;
  roles.shards = static_cast<int>(cfg.cluster.ps);
  roles.workers = static_cast<int>(cfg.sim.workers);
  roles.world = roles.shards + roles.workers;
  roles.first_worker = roles.shards;
  roles.rule = config::update_rule(cfg, mode, roles.workers,
                                   "sim.workers = " + std::to_string(roles.workers));
  const layout::Plan plan = layout::make_plan(cfg, roles, nominal_train_count(cfg));

  SimSetup st;
  st.mode = mode;
  st.workers = roles.workers;
  st.n = roles.rule.n;
  const std::size_t count =
      cfg.sim.param_count > 0 ? static_cast<std::size_t>(cfg.sim.param_count) : param_count;
  // A model of fewer layers than shards cannot be placed by layers: equal
  // slices of floats, whole messages (the summary's sim.placement says so).
  if (cfg.sim.param_count == 0 && layers.size() >= static_cast<std::size_t>(roles.shards) &&
      !layers.empty()) {
    // Whole layers per shard, as the pipelined exchange places them.
    std::vector<layout::Group> groups;
    std::size_t offset = 0;
    for (const auto& l : layers) {
      groups.push_back({"layer " + std::to_string(groups.size()), offset, l.count});
      offset += l.count;
    }
    for (const auto& slice : layout::balanced_slices(groups, roles.shards)) {
      st.slice_counts.push_back(slice.count);
    }
    st.layers = layers;
    st.pipeline = cfg.exchange.pipeline;
    st.bucket_bytes = static_cast<double>(cfg.exchange.bucket_bytes);
  } else {
    for (const auto& slice : layout::shard_slices(count, roles.shards)) {
      st.slice_counts.push_back(slice.count);
    }
  }
  st.batch = cfg.train.batch;
  st.total_steps = plan.total_steps;
  st.target_examples = plan.target_examples;
  st.timeout_s = cfg.train.timeout_ms / 1000.0;
  st.poll_max_s = cfg.sim.poll_max_us * 1e-6;
  st.ssp_bound = cfg.train.ssp_bound;
  st.agree = cfg.train.agree_shards && t.versioned && st.slice_counts.size() > 1;
  st.lr = static_cast<float>(cfg.optim.lr * roles.rule.lr_multiplier(roles.rule.n));
  st.network = network_params(cfg.sim.latency_us, cfg.sim.bandwidth_gbps, cfg.sim.link_sharing);
  st.host_of = host_layout(static_cast<int>(st.slice_counts.size()), st.workers,
                           static_cast<int>(cfg.sim.shards_per_host),
                           static_cast<int>(cfg.sim.workers_per_host));
  st.timing = timing;
  st.stragglers = stragglers;
  return st;
}

namespace {

constexpr std::size_t kFlushBytes =
    1 << 22;  // the other shards' records are copied in blocks of 4 MiB

// What was modelled, for the summary's "sim" block.
nlohmann::json sim_block(const config::Config& cfg, const SimSetup& st, const SimResult& r,
                         const std::optional<nlohmann::json>& fit, double cpu_s) {
  std::size_t count = 0;
  for (const auto c : st.slice_counts) count += c;
  nlohmann::json timing;
  if (fit) {
    timing = {{"fitted", *fit}};
  } else {
    timing = {{"compute_ms", cfg.sim.compute_ms},
              {"compute_cv", cfg.sim.compute_cv},
              {"compute_dist", config::to_string(cfg.sim.compute_dist)},
              {"overhead_ms", cfg.sim.overhead_ms},
              {"apply_ms", cfg.sim.apply_ms}};
  }
  nlohmann::json slices = nlohmann::json::array();
  for (const auto c : st.slice_counts) slices.push_back(c);
  return {{"workers", st.workers},
          {"shards", st.slice_counts.size()},
          {"param_count", count},
          // Whole layers per shard (with the model's layers) or equal floats.
          {"placement", st.layers.empty() ? "floats" : "layers"},
          {"slice_counts", slices},
          {"pipeline", st.pipeline},
          {"agree_shards", st.agree},
          {"bucket_bytes", st.bucket_bytes},
          {"reply_bytes", message_bytes(st.slice_counts[0])},
          {"latency_us", cfg.sim.latency_us},
          {"poll_max_us", cfg.sim.poll_max_us},
          {"bandwidth_gbps", cfg.sim.bandwidth_gbps},
          {"shards_per_host", cfg.sim.shards_per_host},
          {"workers_per_host", cfg.sim.workers_per_host},
          {"link_sharing", config::to_string(cfg.sim.link_sharing)},
          {"stragglers", cfg.stragglers.model},
          {"timing", timing},
          {"seed", cfg.sim.seed},
          {"records", config::to_string(cfg.sim.records)},
          {"events", r.events},
          {"gradients", r.gradients},
          {"cpu_s", cpu_s}};
}

// The end of a simulated run, in every mode: the analysis of its records
// on the simulated clock, summary.json with the run's "sim" block, the
// report.
void finish_run(SimulateOutcome& out, const config::Config& cfg, metrics::Analyzer& analyzer,
                nlohmann::json sim) {
  metrics::RunInfo& info = analyzer.info();
  info.wall_s = out.result.end_s;
  info.examples = out.result.examples;
  info.epochs =
      static_cast<double>(out.result.examples) / static_cast<double>(nominal_train_count(cfg));
  metrics::RunAnalysis an = analyzer.finish();
  an.summary["clock"] = "simulated";
  an.summary["sim"] = std::move(sim);
  metrics::write_file_atomic(out.run_dir / "summary.json", an.summary.dump(2) + "\n");
  out.report = metrics::format_report(an, {});
}

// train.mode = allreduce (sim/allreduce.hpp): K = sim.workers ranks, the
// given timing, records and summary as a real allreduce run's.
SimulateOutcome simulate_allreduce_run(const config::Config& cfg, std::size_t param_count) {
  layout::Roles roles;
  roles.mode = cfg.train.mode;
  roles.workers = static_cast<int>(cfg.sim.workers);
  roles.world = roles.workers;
  roles.rule = config::update_rule(cfg, roles.mode, roles.workers,
                                   "sim.workers = " + std::to_string(roles.workers));
  const layout::Plan plan = layout::make_plan(cfg, roles, nominal_train_count(cfg));
  const worker::StragglerModel stragglers(cfg.stragglers);
  AllreduceSimSetup st;
  st.workers = roles.workers;
  st.train = cfg.train;
  st.total_steps = plan.total_steps;
  st.target_examples = plan.target_examples;
  st.param_count = param_count;
  st.lr = static_cast<float>(cfg.optim.lr * roles.rule.lr_multiplier(roles.rule.n));
  st.network = network_params(cfg.sim.latency_us, cfg.sim.bandwidth_gbps);
  st.timing = timing_from_config(cfg);
  st.stragglers = stragglers.active() ? &stragglers : nullptr;

  SimulateOutcome out;
  out.run_dir = metrics::create_run_dir(cfg.run.dir, cfg.run.name, cfg.run.overwrite);
  metrics::write_file_atomic(out.run_dir / "config.toml", config::to_toml(cfg));
  std::optional<metrics::JsonlWriter> steps;
  if (cfg.sim.records != config::SimRecords::kNone) steps.emplace(out.run_dir / "steps.jsonl");
  const RunClock clock;
  const auto board = metrics::open_run_board(cfg.run, out.run_dir, "sim", clock);
  metrics::RunInfo info;
  info.mode = roles.mode;
  info.n = roles.workers;
  info.workers = roles.workers;
  info.batch = cfg.train.batch;
  metrics::Analyzer analyzer(info);
  std::string line;
  st.on_step = [&](metrics::StepRecord&& r) {
    r.clock = "simulated";
    analyzer.add(r);
    if (board) board->step(r);
    if (steps) {
      line.clear();
      metrics::append_json_line(line, r);
      steps->write_raw(line);
    }
  };
  const auto t0 = std::chrono::steady_clock::now();
  out.result = simulate_allreduce(st);
  out.cpu_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (steps) steps->flush();
  if (board) board->flush();
  finish_run(out, cfg, analyzer,
             {{"workers", st.workers},
              {"param_count", param_count},
              {"allreduce_s", ring_allreduce_s(st.network, st.workers, param_count)},
              {"latency_us", cfg.sim.latency_us},
              {"bandwidth_gbps", cfg.sim.bandwidth_gbps},
              {"stragglers", cfg.stragglers.model},
              {"timing",
               {{"compute_ms", cfg.sim.compute_ms},
                {"compute_cv", cfg.sim.compute_cv},
                {"compute_dist", config::to_string(cfg.sim.compute_dist)},
                {"overhead_ms", cfg.sim.overhead_ms},
                {"apply_ms", cfg.sim.apply_ms}}},
              {"seed", cfg.sim.seed},
              {"gradients", out.result.gradients},
              {"cpu_s", out.cpu_s}});
  return out;
}

}  // namespace

SimulateOutcome simulate_run(const config::Config& cfg, const SimulateOptions& options) {
  const std::size_t param_count =
      cfg.sim.param_count > 0 ? static_cast<std::size_t>(cfg.sim.param_count) : options.param_count;
  if (cfg.train.mode == config::Mode::kAllreduce) {
    if (options.from) {
      throw ConfigError(
          "syncopt simulate --from fits the parameter-server modes; an allreduce run is "
          "simulated from the [sim] keys (sim.compute_ms, sim.compute_cv, ...)");
    }
    return simulate_allreduce_run(cfg, param_count);
  }
  TimingModel timing = timing_from_config(cfg);
  std::optional<nlohmann::json> fit_json;
  if (options.from) {
    const Fit fit =
        fit_run(*options.from, timing, network_params(cfg.sim.latency_us, cfg.sim.bandwidth_gbps),
                param_count, cfg.sim.poll_max_us * 1e-6);
    timing = fit.timing;
    fit_json = fit.to_json(*options.from);
  }
  const worker::StragglerModel stragglers(cfg.stragglers);
  SimSetup st = make_setup(cfg, param_count, timing, stragglers.active() ? &stragglers : nullptr,
                           options.layers);

  SimulateOutcome out;
  out.run_dir = metrics::create_run_dir(cfg.run.dir, cfg.run.name, cfg.run.overwrite);
  metrics::write_file_atomic(out.run_dir / "config.toml", config::to_toml(cfg));
  // The records are written as they come and summarised on the way, never
  // kept: a thousand workers make ten million gradient records per shard
  // and 10,000 steps. steps.jsonl as in a real run: shard 0's records, then
  // (sim.records = all) the other shards', parked in a file of their own.
  const auto records = cfg.sim.records;
  std::optional<metrics::JsonlWriter> steps, others;
  if (records != config::SimRecords::kNone) steps.emplace(out.run_dir / "steps.jsonl");
  const auto others_path = out.run_dir / "steps.others.jsonl.tmp";
  if (records == config::SimRecords::kAll && st.slice_counts.size() > 1) {
    others.emplace(others_path);
  }
  // TensorBoard as in a real run, shard 0's records only; the wall-time axis
  // is the simulated time from the moment the simulation started.
  const RunClock clock;
  const auto board = metrics::open_run_board(cfg.run, out.run_dir, "sim", clock);
  metrics::RunInfo info;
  info.mode = st.mode;
  info.n = st.n;
  info.b = config::traits(st.mode).has_backups ? st.workers - st.n : 0;
  info.shards = static_cast<int>(st.slice_counts.size());
  info.workers = st.workers;
  info.batch = cfg.train.batch;
  info.recorded_shards = records == config::SimRecords::kAll ? 0 : 1;
  metrics::Analyzer analyzer(info);
  std::string line;
  st.on_step = [&](metrics::StepRecord&& r) {
    r.clock = "simulated";
    const bool first = r.shard == 0;
    if (first || records == config::SimRecords::kAll) analyzer.add(r);
    if (first && board) board->step(r);
    auto* file = first ? (steps ? &*steps : nullptr) : (others ? &*others : nullptr);
    if (file != nullptr) {
      line.clear();
      metrics::append_json_line(line, r);
      file->write_raw(line);
    }
  };
  const auto t0 = std::chrono::steady_clock::now();
  out.result = simulate(st);
  out.cpu_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (others) {
    others->flush();
    others.reset();
    std::ifstream in(others_path, std::ios::binary);
    std::string block(kFlushBytes, '\0');
    while (in.read(block.data(), static_cast<std::streamsize>(block.size())) || in.gcount() > 0) {
      steps->write_raw(block.substr(0, static_cast<std::size_t>(in.gcount())));
    }
    std::filesystem::remove(others_path);
  }
  if (steps) steps->flush();
  if (board) board->flush();
  finish_run(out, cfg, analyzer, sim_block(cfg, st, out.result, fit_json, out.cpu_s));
  return out;
}

}  // namespace syncopt::sim
