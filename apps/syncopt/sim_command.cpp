// `syncopt simulate` and `syncopt plan` (see commands.hpp).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "commands.hpp"
#include "common/atomic_file.hpp"
#include "common/error.hpp"
#include "common/log.hpp"
#include "config/config.hpp"
#include "layout/roles.hpp"
#include "metrics/analysis.hpp"
#include "metrics/records.hpp"
#include "nn/graph.hpp"
#include "plan/planner.hpp"
#include "plan/sources.hpp"
#include "rundir/meta.hpp"
#include "sim/fit.hpp"
#include "sim/run.hpp"
#include "train/inputs.hpp"

namespace syncopt::app {

// ---------------------------------------------------------------- simulate

namespace {

// The model's parameter groups for the simulator: floats, and their share
// of the forward FLOPs (nn::group_flops_shares).
std::vector<sim::LayerCost> layer_costs(const nn::Graph& graph) {
  std::vector<sim::LayerCost> out;
  const std::vector<double> shares = nn::group_flops_shares(graph);
  for (std::size_t i = 0; i < graph.groups.size(); ++i) {
    out.push_back({graph.groups[i].count, shares[i]});
  }
  return out;
}

// With --from, K is the run's (its summary.json's "workers") unless the
// command line sets sim.workers itself (to scale the fitted run up): the
// config.toml a run writes carries sim.workers's default, not its K, and a
// simulation of the wrong K can still match the run's mean step (issue 29).
// Returns the note printed about it, empty without --from.
std::string take_run_workers(const std::string& from, std::vector<std::string>& overrides) {
  if (from.empty()) return {};
  const std::filesystem::path summary = std::filesystem::path(from) / "summary.json";
  int run_k = 0;
  if (std::filesystem::exists(summary)) {
    try {
      run_k = nlohmann::json::parse(read_file_bytes(summary)).value("workers", 0);
    } catch (const std::exception& e) {
      throw DataError(summary.string() + ": not a run summary (" + e.what() +
                      "); give the workers with --set sim.workers=K");
    }
  }
  const auto set = std::find_if(overrides.rbegin(), overrides.rend(), [](const std::string& o) {
    return o.rfind("sim.workers=", 0) == 0;
  });
  if (set != overrides.rend()) {
    return "sim.workers = " + set->substr(12) + " (--set" +
           (run_k > 0 ? "; the run had K = " + std::to_string(run_k) : std::string()) + ")";
  }
  if (run_k <= 0) {
    return "sim.workers from the config: " + summary.string() +
           " gives no worker count (a run that did not finish?)";
  }
  overrides.push_back("sim.workers=" + std::to_string(run_k));
  return "sim.workers = " + std::to_string(run_k) + ", the run's K (" + summary.string() +
         "; --set sim.workers=K simulates another K)";
}

}  // namespace

CLI::App* add_simulate_command(CLI::App& app, SimulateArgs& args) {
  auto* cmd = app.add_subcommand(
      "simulate",
      "Simulate a config's cluster in simulated time, no MPI and no training: K = sim.workers "
      "workers and S = cluster.ps shards run the real protocol (pull, compute, push; sync drops "
      "the late gradients beyond the first N = K - train.backups; async, softsync, ssp, timeout "
      "likewise), every decision taken by the same shard logic as a real run, with the same "
      "seeded [stragglers]. Compute time: sim.compute_ms with spread sim.compute_cv, or the "
      "measured times of a real run (--from, which also takes the run's K unless --set "
      "sim.workers is given). Network: sim.latency_us per message and "
      "sim.bandwidth_gbps per link; a shard sends its replies one after another, so answering "
      "K workers costs K * message size / bandwidth. Writes runs/<run.name>/ (config.toml, "
      "steps.jsonl, summary.json, times in simulated seconds, marked \"clock\": "
      "\"simulated\"; and tb/, TensorBoard events of shard 0's steps, unless run.tensorboard "
      "= false), which `syncopt report`, scripts/plot.py and TensorBoard read like a real run. "
      "Thousands of workers take seconds.");
  cmd->add_option("config", args.config_path, "TOML experiment file, e.g. configs/sim-k100.toml")
      ->required();
  add_set_option(cmd, args.overrides,
                 "Override one key, section.key=value (repeatable), e.g. --set sim.workers=1000 "
                 "--set train.backups=4");
  cmd->add_option("--from", args.from,
                  "A real run directory (runs/<name>) to fit the timing to: each worker's "
                  "measured compute time and overhead per gradient (arrival - answer - compute - "
                  "straggler delay - network - the shard's expected poll wait) are replayed "
                  "round by round (workers answered together replay one recorded pass), the "
                  "shard's apply times drawn from the run's measured ones")
      ->type_name("RUN_DIR");
  cmd->add_flag("-q,--quiet", args.quiet, "Print only the run directory");
  cmd->footer(
      "The [sim] keys are listed by `syncopt train --help` and in configs/README.md.\n"
      "Example: check the model against a real run (its ranks share a node: no "
      "network of its own), then scale it up:\n"
      "  mpirun -np 6 build/syncopt train CONFIG --set run.name=real\n"
      "  build/syncopt simulate runs/real/config.toml --from runs/real "
      "--set run.name=sim --set sim.latency_us=0 "
      "--set sim.bandwidth_gbps=0   (K: the run's)\n"
      "  build/syncopt simulate runs/real/config.toml --from runs/real "
      "--set run.name=sim-1000 --set sim.workers=1000\n" +
      std::string(kExitCodes));
  return cmd;
}

int run_simulate(const SimulateArgs& args) {
  using namespace syncopt;
  std::vector<std::string> overrides = args.overrides;
  const std::string workers_note = take_run_workers(args.from, overrides);
  const config::Config cfg = config::load(args.config_path, overrides);
  sim::SimulateOptions opt;
  const nn::Graph graph = nn::model_graph(train::expected_model_spec(cfg));
  opt.param_count = graph.layout.count;
  opt.layers = layer_costs(graph);
  if (!args.from.empty()) opt.from = args.from;
  const std::string start = rundir::utc_now();
  const sim::SimulateOutcome out = sim::simulate_run(cfg, opt);
  // run.json like a real run's: one process, the simulated layout.
  rundir::LaunchFacts facts;
  facts.process_role = "simulator";
  try {
    facts.roles = layout::make_roles(
        cfg, static_cast<int>(cfg.cluster.ps + (cfg.cluster.evaluator ? 1 : 0) + cfg.sim.workers));
  } catch (const Error&) {
    facts.roles = layout::Roles{};  // a mode the layout does not place: no layout recorded
  }
  rundir::RunJournal journal(out.run_dir, cfg.run.name,
                             make_invocation(args.argv, args.config_path, overrides), facts, false,
                             start);
  journal.finish(rundir::Outcome{});
  if (!args.quiet) {
    if (!workers_note.empty()) std::printf("%s\n", workers_note.c_str());
    std::printf("simulated %llu updates (%.3f s simulated) of %d workers in %.2f s: %llu events\n",
                static_cast<unsigned long long>(out.result.steps), out.result.end_s,
                static_cast<int>(cfg.sim.workers), out.cpu_s,
                static_cast<unsigned long long>(out.result.events));
    std::printf("%s", out.report.c_str());
  }
  std::printf("run directory: %s  (syncopt report %s; scripts/plot.py %s)\n",
              out.run_dir.string().c_str(), out.run_dir.string().c_str(),
              out.run_dir.string().c_str());
  return 0;
}

// -------------------------------------------------------------------- plan

CLI::App* add_plan_command(CLI::App& app, PlanArgs& args) {
  auto* cmd = app.add_subcommand(
      "plan",
      "Choose N and b for a cluster of K workers (the paper's §4): for every N, the time to a "
      "target accuracy is I(N) * T(N, K - N), where T(N, b) is the seconds per update with the "
      "first N of N + b gradients and I(N) = a + c/N the updates needed (larger N: a better "
      "average, fewer updates; but waiting for the N-th of K arrivals takes longer). T comes "
      "from simulations (--sim) or from sync runs of K workers (--runs: a run's own N is "
      "measured, other N read off its time to the k-th gradient, as the paper did); I from "
      "--iters a,c or fitted to runs at several N (--runs with --target-acc). Prints the table "
      "and the best N; --out writes it as JSON for scripts/plot_plan.py.");
  cmd->add_option("--workers,-K", args.workers, "K, the workers of the cluster")
      ->required()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--runs", args.runs,
                  "Run directories (runs/<name>): T(N, b) from sync runs of K workers, and I(N) "
                  "from their eval.jsonl with --target-acc")
      ->type_name("RUN_DIR ...");
  cmd->add_option("--sim", args.sim_config,
                  "A config to simulate for every N (train.mode = sync, train.backups = K - N, "
                  "sim.workers = K): T(N, b) from the simulated arrivals; train.steps updates each")
      ->type_name("CONFIG");
  add_set_option(cmd, args.overrides, "With --sim: override a key, e.g. --set train.steps=200");
  cmd->add_option("--from", args.from, "With --sim: fit the timing to a real run (as simulate)")
      ->type_name("RUN_DIR");
  cmd->add_option("--n", args.n_values,
                  "With --sim: the N to simulate, as LO:HI or a comma list (default 1:K)")
      ->type_name("LIST");
  cmd->add_option("--target-acc", args.target_acc,
                  "Test accuracy to reach, in [0, 1]: I(N) = the first step of a run's "
                  "eval.jsonl at it, fitted over --runs")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_flag("--ema", args.ema, "Use the EMA's accuracy (test_acc_ema) for --target-acc");
  cmd->add_option("--iters", args.iters,
                  "I(N) = a + c/N given as a,c (e.g. the paper's Inception runs, 137.5k updates "
                  "at N = 50 and 76.2k at N = 100: --iters 14900,6130000)")
      ->delimiter(',')
      ->expected(2)
      ->type_name("A,C");
  cmd->add_option("--threads", args.threads, "Simulations run in parallel (default: every core)");
  cmd->add_option("--out", args.out, "Write the plan as JSON (scripts/plot_plan.py plots it)")
      ->type_name("FILE");
  cmd->footer(
      "Examples:\n"
      "  build/syncopt plan -K 100 --sim configs/sim-k100.toml --iters 14900,6130000 "
      "--out plan.json\n"
      "  build/syncopt plan -K 5 --runs runs/b0 runs/b1 runs/b2 --target-acc 0.85\n"
      "  scripts/plot_plan.py plan.json --out plan.png\n" +
      std::string(kExitCodes));
  return cmd;
}

// "LO:HI" or "a,b,c" -> the N to simulate, each in 1..K.
std::vector<int> parse_n_values(const std::string& text, int workers) {
  std::vector<int> out;
  try {
    if (text.empty()) {
      for (int n = 1; n <= workers; ++n) out.push_back(n);
    } else if (const auto colon = text.find(':'); colon != std::string::npos) {
      for (int n = std::stoi(text.substr(0, colon)); n <= std::stoi(text.substr(colon + 1)); ++n) {
        out.push_back(n);
      }
    } else {
      std::stringstream ss(text);
      for (std::string item; std::getline(ss, item, ',');) out.push_back(std::stoi(item));
    }
  } catch (const std::exception&) {
    throw syncopt::UsageError("--n " + text + ": expected LO:HI or a comma list, e.g. 90:100");
  }
  if (out.empty() || *std::min_element(out.begin(), out.end()) < 1 ||
      *std::max_element(out.begin(), out.end()) > workers) {
    throw syncopt::UsageError("--n " + text + ": every N must be in 1.." + std::to_string(workers));
  }
  return out;
}

// T(N, b) from a simulation (--sim) or from runs.
std::map<int, double> plan_step_times(const PlanArgs& args, std::vector<std::string>& notes,
                                      std::string& source) {
  using namespace syncopt;
  if (args.sim_config.empty()) {
    source = "runs";
    return plan::step_times_from_runs({args.runs.begin(), args.runs.end()}, args.workers, notes);
  }
  const config::Config cfg = config::load(args.sim_config, args.overrides);
  const nn::Graph graph = nn::model_graph(train::expected_model_spec(cfg));
  const std::size_t count =
      cfg.sim.param_count > 0 ? static_cast<std::size_t>(cfg.sim.param_count) : graph.layout.count;
  sim::TimingModel timing = sim::timing_from_config(cfg);
  if (!args.from.empty()) {
    timing = sim::fit_run(args.from, timing,
                          sim::network_params(cfg.sim.latency_us, cfg.sim.bandwidth_gbps), count,
                          cfg.sim.poll_max_us * 1e-6)
                 .timing;
  }
  const auto n_values = parse_n_values(args.n_values, args.workers);
  const int threads = args.threads > 0
                          ? args.threads
                          : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  source = "simulation of " + args.sim_config + " (" + std::to_string(cfg.train.steps) +
           " updates per N" + (args.from.empty() ? "" : ", timing fitted to " + args.from) + ")";
  return plan::step_times_from_sim(cfg, args.workers, count, timing, n_values, threads,
                                   layer_costs(graph));
}

int run_plan(const PlanArgs& args) {
  using namespace syncopt;
  if (args.sim_config.empty() && args.runs.empty()) {
    throw UsageError("plan needs step times: give --sim CONFIG or --runs RUN_DIR ...");
  }
  std::vector<std::string> notes;
  plan::ItersModel iters;
  if (!args.iters.empty()) {
    iters.a = args.iters[0];
    iters.c = args.iters[1];
    iters.source = "given (--iters)";
  } else if (!args.runs.empty() && args.target_acc > 0.0) {
    iters = plan::fit_iters(plan::iters_from_runs({args.runs.begin(), args.runs.end()},
                                                  args.target_acc, args.ema, notes));
  } else {
    throw UsageError("plan needs I(N): give --iters a,c, or --runs at several N with --target-acc");
  }
  std::string source;
  const auto step_s = plan_step_times(args, notes, source);
  plan::Plan p = plan::choose(args.workers, step_s, iters);
  p.step_source = source;
  p.target_acc = args.target_acc;
  for (const auto& n : notes) std::printf("note: %s\n", n.c_str());
  std::printf("%s", plan::format(p).c_str());
  if (!args.out.empty()) {
    nlohmann::json j = plan::to_json(p);
    j["notes"] = notes;
    metrics::write_file_atomic(args.out, j.dump(2) + "\n");
    std::printf("plan written to %s (scripts/plot_plan.py %s)\n", args.out.c_str(),
                args.out.c_str());
  }
  return 0;
}

}  // namespace syncopt::app
