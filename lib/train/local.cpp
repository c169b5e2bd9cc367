// The single-process training loop (see local.hpp).
#include "train/local.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "common/error.hpp"
#include "data/batch.hpp"
#include "metrics/analysis.hpp"
#include "metrics/records.hpp"
#include "optim/optimizer.hpp"

namespace syncopt::train {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

EvalResult evaluate(nn::Network& net, const float* params, const data::Dataset& data) {
  const int max_batch = net.max_batch();
  std::vector<float> logits(static_cast<std::size_t>(max_batch) * data.classes);
  double loss_sum = 0.0;
  std::int64_t correct = 0;
  for (std::int64_t start = 0; start < data.count; start += max_batch) {
    const int n = static_cast<int>(std::min<std::int64_t>(max_batch, data.count - start));
    net.predict(params, data.image(start), n, logits.data());
    for (int i = 0; i < n; ++i) {
      const float* z = logits.data() + static_cast<std::size_t>(i) * data.classes;
      const int label = data.labels[static_cast<std::size_t>(start + i)];
      const float zmax = *std::max_element(z, z + data.classes);
      double sum = 0.0;
      for (int k = 0; k < data.classes; ++k) sum += std::exp(static_cast<double>(z[k] - zmax));
      loss_sum += std::log(sum) - static_cast<double>(z[label] - zmax);
      if (std::max_element(z, z + data.classes) - z == label) ++correct;
    }
  }
  EvalResult r;
  if (data.count > 0) {
    r.loss = loss_sum / static_cast<double>(data.count);
    r.accuracy = static_cast<double>(correct) / static_cast<double>(data.count);
  }
  return r;
}

void write_eval(metrics::JsonlWriter& log, std::uint64_t step, double wall_s,
                std::uint64_t examples, double train_count, const EvalResult& raw,
                const EvalResult& avg) {
  log.write({{"step", step},
             {"wall_s", wall_s},
             {"examples", examples},
             {"epoch", static_cast<double>(examples) / train_count},
             {"test_loss", raw.loss},
             {"test_acc", raw.accuracy},
             {"test_loss_ema", avg.loss},
             {"test_acc_ema", avg.accuracy}});
  log.flush();
}

nn::ModelSpec model_spec(const config::Config& cfg, const data::Dataset& train) {
  nn::ModelSpec spec;
  spec.name = cfg.model.name;
  spec.channels = train.channels;
  spec.height = train.height;
  spec.width = train.width;
  spec.classes = train.classes;
  spec.weight_norm = cfg.model.weight_norm;
  spec.mlp_hidden = static_cast<int>(cfg.model.mlp_hidden);
  return spec;
}

data::LoadOptions load_options(const config::Config& cfg) {
  data::LoadOptions o;
  o.name = cfg.data.name;
  o.path = cfg.data.path;
  o.limit_train = cfg.data.limit_train;
  o.limit_test = cfg.data.limit_test;
  o.synthetic_train = cfg.data.synthetic_train;
  o.synthetic_test = cfg.data.synthetic_test;
  o.seed = cfg.run.seed;
  return o;
}

LocalResult run_local(const config::Config& cfg, bool quiet) {
  if (cfg.run.resume) {
    throw ConfigError("run.resume = true: resuming from a checkpoint is not implemented in this "
                      "version; start a new run (run.resume = false)");
  }
  // 1. Everything that can fail on input happens before any output exists.
  const auto t_load = Clock::now();
  data::TrainTest data = data::load(load_options(cfg));
  spdlog::info("data: {} train / {} test examples of {}x{}x{}, {} classes ({:.2f}s)",
               data.train.count, data.test.count, data.train.channels, data.train.height,
               data.train.width, data.train.classes, seconds_since(t_load));
  const int batch = static_cast<int>(cfg.train.batch);
  if (data.train.count < batch) {
    throw ConfigError("train.batch = " + std::to_string(batch) + " is larger than the " +
                      std::to_string(data.train.count) +
                      " training examples; lower train.batch or raise data.limit_train");
  }
  const nn::ModelSpec spec = model_spec(cfg, data.train);
  const nn::ParamLayout layout = nn::param_layout(spec);
  auto backend = nn::make_backend(cfg.compute.backend, static_cast<int>(cfg.compute.threads));
  auto net = backend->make_network(spec, std::max<int>(batch, static_cast<int>(cfg.eval.batch)));
  std::vector<float> params(layout.count), grad(layout.count);
  nn::init_params(spec, layout, params.data(), cfg.run.seed);

  const double train_count = static_cast<double>(data.train.count);
  const std::int64_t total_steps =
      cfg.train.steps > 0
          ? cfg.train.steps
          : static_cast<std::int64_t>(std::ceil(cfg.train.epochs * train_count / batch));
  // N = 1 in local mode.
  const optim::ScheduleOptions sched = optim::schedule_options(
      cfg.optim, static_cast<double>(total_steps) * batch / train_count, 1.0);
  optim::Optimizer opt(optim::optimizer_options(cfg.optim), layout.count);
  const bool use_ema = cfg.optim.ema > 0.0;
  optim::Ema ema(cfg.optim.ema, params.data(), use_ema ? layout.count : 0);

  // 2. Outputs.
  LocalResult result;
  result.run_dir = metrics::create_run_dir(cfg.run.dir, cfg.run.name, cfg.run.overwrite);
  metrics::write_file_atomic(result.run_dir / "config.toml", config::to_toml(cfg));
  metrics::JsonlWriter steps_log(result.run_dir / "steps.jsonl");
  metrics::JsonlWriter eval_log(result.run_dir / "eval.jsonl");
  spdlog::info("run directory: {}", result.run_dir.string());
  spdlog::info("model {} ({} parameters), backend {} with {} thread(s), batch {}, {} steps "
               "({:.2f} epochs)",
               spec.name, layout.count, backend->name(), cfg.compute.threads, batch, total_steps,
               sched.total_epochs);

  // 3. Train.
  data::BatchLoader loader(data.train, batch, cfg.run.seed, 0, 1, cfg.data.augment,
                          {cfg.data.augment_max_rotate_deg, cfg.data.augment_max_zoom});

  metrics::Progress progress(total_steps, cfg.run.progress_every_steps, quiet);
  const auto t_run = Clock::now();
  double eval_s = 0.0;  // time spent evaluating, excluded from throughput
  double last_eval_wall = 0.0;
  double loss_avg = 0.0;
  std::int64_t examples = 0;

  auto run_eval = [&](std::int64_t step) {
    const auto t0 = Clock::now();
    const EvalResult raw = evaluate(*net, params.data(), data.test);
    const EvalResult avg = use_ema ? evaluate(*net, ema.data(), data.test) : raw;
    eval_s += seconds_since(t0);
    const double wall = seconds_since(t_run);
    last_eval_wall = wall;
    write_eval(eval_log, static_cast<std::uint64_t>(step), wall,
               static_cast<std::uint64_t>(examples), train_count, raw, avg);
    char line[160];
    std::snprintf(line, sizeof(line), "eval step %lld epoch %.2f: test_acc %.2f%%  ema %.2f%%  "
                  "test_loss %.4f",
                  static_cast<long long>(step), static_cast<double>(examples) / train_count,
                  100.0 * raw.accuracy, 100.0 * avg.accuracy, raw.loss);
    progress.note(line);
    result.final_eval = raw;
    result.final_eval_ema = avg;
  };

  for (std::int64_t step = 1; step <= total_steps; ++step) {
    const auto t_start = Clock::now();
    const double t_start_s = seconds_since(t_run);
    loader.next();
    const double epoch = static_cast<double>(examples) / train_count;
    const auto lr = static_cast<float>(optim::learning_rate(sched, epoch));
    const float loss = net->train_step(params.data(), loader.images(), loader.labels(), batch,
                                       grad.data());
    if (!std::isfinite(loss)) {
      throw Error(ExitCode::kInternal,
                  "loss became " + std::to_string(loss) + " at step " + std::to_string(step) +
                      " (lr " + std::to_string(lr) +
                      "): training diverged; lower optim.lr or use a warmup schedule");
    }
    const double arrival = seconds_since(t_start);
    opt.step(params.data(), grad.data(), lr);
    if (use_ema) ema.update(params.data());
    examples += batch;
    const double step_s = seconds_since(t_start);
    loss_avg = step == 1 ? loss : 0.98 * loss_avg + 0.02 * loss;

    steps_log.write({{"step", step},
                     {"shard", 0},
                     {"t_start", t_start_s},
                     {"t_apply", t_start_s + step_s},
                     {"version", step - 1},
                     {"lr", lr},
                     {"loss", loss},
                     {"grads",
                      {{{"worker", 0},
                        {"arrival_s", arrival},
                        {"version", step - 1},
                        {"accepted", true},
                        {"staleness", 0},
                        {"compute_s", arrival}}}}});
    const double elapsed = seconds_since(t_run);
    progress.update(step, static_cast<double>(examples) / train_count, loss_avg,
                    static_cast<double>(examples) / std::max(1e-9, elapsed - eval_s), elapsed);
    const bool by_steps = cfg.eval.every_steps > 0 && step % cfg.eval.every_steps == 0;
    const bool by_time = cfg.eval.every_s > 0.0 && elapsed - last_eval_wall >= cfg.eval.every_s;
    if ((by_steps || by_time) && step != total_steps) run_eval(step);
  }
  run_eval(total_steps);
  progress.finish();
  steps_log.flush();

  result.steps = total_steps;
  result.examples = examples;
  result.wall_s = seconds_since(t_run);
  const double train_s = result.wall_s - eval_s;
  result.examples_per_s = static_cast<double>(examples) / std::max(1e-9, train_s);

  // The same analysis as a distributed run's, so `syncopt report` reads both.
  metrics::RunInfo info;
  info.mode = "local";
  info.batch = batch;
  info.wall_s = result.wall_s;
  info.examples = static_cast<std::uint64_t>(examples);
  info.epochs = static_cast<double>(examples) / train_count;
  info.test_loss = result.final_eval.loss;
  info.test_acc = result.final_eval.accuracy;
  info.test_loss_ema = result.final_eval_ema.loss;
  info.test_acc_ema = result.final_eval_ema.accuracy;
  nlohmann::json summary =
      metrics::analyze(metrics::read_jsonl(result.run_dir / "steps.jsonl"), info).summary;
  // Training throughput without the time spent evaluating.
  summary["examples_per_s"] = result.examples_per_s;
  summary["train_s"] = train_s;
  summary["eval_s"] = eval_s;
  summary["model"] = spec.name;
  summary["params"] = layout.count;
  summary["backend"] = backend->name();
  summary["threads"] = cfg.compute.threads;
  summary["run_dir"] = result.run_dir.string();
  metrics::write_file_atomic(result.run_dir / "summary.json", summary.dump(2) + "\n");
  // Final parameters, raw float32 in the layout's order (tests compare runs).
  metrics::write_floats(result.run_dir / "params.f32", params);
  metrics::write_floats(result.run_dir / "params_ema.f32",
                        use_ema ? std::vector<float>(ema.data(), ema.data() + ema.count()) : params);
  return result;
}

}  // namespace syncopt::train
