// T and I from runs and simulations (see sources.hpp).
#include "plan/sources.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "common/error.hpp"
#include "metrics/analysis.hpp"
#include "sim/run.hpp"
#include "sim/simulator.hpp"
#include "worker/straggler.hpp"

namespace syncopt::plan {

namespace {

nlohmann::json read_summary(const std::filesystem::path& run) {
  const auto path = run / "summary.json";
  std::ifstream in(path);
  if (!in) {
    throw MissingInputError("'" + path.string() +
                            "' not found: give the directory of a finished run (runs/<name>)");
  }
  try {
    return nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw DataError(path.string() + ": not JSON (" + e.what() + ")");
  }
}

// Mean seconds between shard 0's updates, after the first (which carries
// the run's start-up).
double mean_step_s(const std::vector<double>& t_apply) {
  if (t_apply.size() < 2) return 0.0;
  return (t_apply.back() - t_apply.front()) / static_cast<double>(t_apply.size() - 1);
}

}  // namespace

std::map<int, double> step_times_from_runs(const RunDirs& runs, int workers,
                                           std::vector<std::string>& notes) {
  std::map<int, double> measured;
  std::map<int, std::vector<double>> estimated;
  for (const auto& run : runs) {
    const auto s = read_summary(run);
    const std::string mode = s.value("mode", std::string());
    if (config::enum_from_name<config::Mode>(mode) != config::Mode::kSync ||
        s.value("workers", 0) != workers) {
      notes.push_back(run.string() + ": mode " + mode + " with " +
                      std::to_string(s.value("workers", 0)) + " workers, not sync with " +
                      std::to_string(workers) + ": not used for T(N, b)");
      continue;
    }
    std::vector<double> t_apply;
    for (const auto& r : metrics::read_steps(run / "steps.jsonl")) {
      if (r.shard == 0) t_apply.push_back(r.t_apply);
    }
    std::sort(t_apply.begin(), t_apply.end());
    measured[s.at("N").get<int>()] = mean_step_s(t_apply);
    const auto& kth = s.at("time_to_kth_mean_s");
    const auto& samples = s.at("time_to_kth_samples");
    const double apply = s.value("apply_time_p50_s", 0.0);
    for (std::size_t k = 0; k < kth.size(); ++k) {
      if (samples[k].get<std::size_t>() == 0) continue;
      estimated[static_cast<int>(k) + 1].push_back(kth[k].get<double>() + apply);
    }
  }
  std::map<int, double> out = measured;
  for (const auto& [n, v] : estimated) {
    if (out.count(n)) continue;
    double sum = 0.0;
    for (const double x : v) sum += x;
    out[n] = sum / static_cast<double>(v.size());
  }
  return out;
}

std::map<int, double> step_times_from_sim(const config::Config& cfg, int workers,
                                          std::size_t param_count, const sim::TimingModel& timing,
                                          const std::vector<int>& n_values, int threads,
                                          const std::vector<sim::LayerCost>& layers) {
  const worker::StragglerModel stragglers(cfg.stragglers);
  std::map<int, double> out;
  std::mutex mu;
  std::exception_ptr failed;  // the first error of any thread, rethrown here
  std::atomic<std::size_t> next{0};
  const auto work = [&] {
    try {
      for (std::size_t i = next++; i < n_values.size(); i = next++) {
        config::Config c = cfg;
        c.train.mode = config::Mode::kSync;
        c.sim.workers = workers;
        c.train.backups = workers - n_values[i];
        sim::SimSetup st = sim::make_setup(c, param_count, timing,
                                           stragglers.active() ? &stragglers : nullptr, layers);
        std::vector<double> t_apply;
        st.on_step = [&](metrics::StepRecord&& r) {
          if (r.shard == 0) t_apply.push_back(r.t_apply);
        };
        sim::simulate(st);
        const std::lock_guard<std::mutex> lock(mu);
        out[n_values[i]] = mean_step_s(t_apply);
      }
    } catch (...) {
      const std::lock_guard<std::mutex> lock(mu);
      if (!failed) failed = std::current_exception();
      next = n_values.size();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::max(1, threads); ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (failed) std::rethrow_exception(failed);
  return out;
}

std::vector<std::pair<int, double>> iters_from_runs(const RunDirs& runs, double target_acc,
                                                    bool ema, std::vector<std::string>& notes) {
  std::vector<std::pair<int, double>> out;
  const char* field = ema ? "test_acc_ema" : "test_acc";
  for (const auto& run : runs) {
    const auto s = read_summary(run);
    const int n = s.value("N", 0);
    if (!std::filesystem::exists(run / "eval.jsonl")) {
      notes.push_back(run.string() + ": no eval.jsonl: not used for I(N)");
      continue;
    }
    bool reached = false;
    for (const auto& e : metrics::read_jsonl(run / "eval.jsonl")) {
      if (e.value(field, 0.0) >= target_acc) {
        out.emplace_back(n, e.at("step").get<double>());
        reached = true;
        break;
      }
    }
    if (!reached) {
      notes.push_back(run.string() + ": " + field + " never reached " + std::to_string(target_acc) +
                      ": not used for I(N)");
    }
  }
  return out;
}

}  // namespace syncopt::plan
