// The single-process training loop (see local.hpp).
#include "train/local.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include <spdlog/spdlog.h>

#include "common/clock.hpp"
#include "common/error.hpp"
#include "data/batch.hpp"
#include "layout/roles.hpp"
#include "metrics/analysis.hpp"
#include "metrics/records.hpp"
#include "metrics/step_record.hpp"
#include "optim/optimizer.hpp"
#include "train/inputs.hpp"

namespace syncopt::train {

namespace {

class LocalTrainer {
 public:
  LocalTrainer(const config::Config& cfg, const Compute& compute, bool quiet);
  LocalResult run();

 private:
  void step(std::int64_t k);
  void finish();

  const config::Config& m_cfg;
  const int m_batch;
  data::TrainTest m_data;
  nn::ModelSpec m_spec;
  nn::ParamLayout m_layout;
  std::unique_ptr<nn::Backend> m_backend;
  std::unique_ptr<nn::Network> m_net;
  layout::Plan m_plan;
  std::vector<float> m_params, m_grad;
  std::unique_ptr<optim::Optimizer> m_opt;
  std::unique_ptr<optim::Ema> m_ema;
  optim::ScheduleOptions m_sched;
  bool m_use_ema;
  bool m_quiet;

  LocalResult m_result;
  std::unique_ptr<metrics::StepLog> m_steps;
  std::unique_ptr<metrics::JsonlWriter> m_eval_file;
  std::unique_ptr<EvalLog> m_eval;
  std::unique_ptr<data::BatchLoader> m_loader;
  std::unique_ptr<metrics::Progress> m_progress;
  RunClock m_clock;
  EvalTimer m_timer;
  double m_eval_s = 0.0;  // time spent evaluating, excluded from throughput
  double m_loss_avg = 0.0;
  std::int64_t m_examples = 0;
};

// Everything that can fail on input happens before any output exists.
LocalTrainer::LocalTrainer(const config::Config& cfg, const Compute& compute, bool quiet)
    : m_cfg(cfg), m_batch(static_cast<int>(cfg.train.batch)), m_use_ema(cfg.optim.ema > 0.0),
      m_quiet(quiet), m_timer(cfg.eval) {
  const RunClock load_clock;
  m_data = data::load(load_options(cfg));
  spdlog::info("data: {} train / {} test examples of {}x{}x{}, {} classes ({:.2f}s)",
               m_data.train.count, m_data.test.count, m_data.train.channels,
               m_data.train.height, m_data.train.width, m_data.train.classes, load_clock.now());
  if (m_data.train.count < m_batch) {
    throw ConfigError("train.batch = " + std::to_string(m_batch) + " is larger than the " +
                      std::to_string(m_data.train.count) +
                      " training examples; lower train.batch or raise data.limit_train");
  }
  m_spec = model_spec(cfg, m_data.train);
  m_layout = nn::param_layout(m_spec);
  m_backend = compute.make_backend(0);
  m_net = m_backend->make_network(m_spec, std::max<int>(m_batch, static_cast<int>(cfg.eval.batch)));
  m_params.resize(m_layout.count);
  m_grad.resize(m_layout.count);
  nn::init_params(m_spec, m_layout, m_params.data(), cfg.run.seed);
  m_plan = layout::make_plan(cfg, layout::make_roles(cfg, 1), m_data.train.count);
  m_sched = optim::schedule_options(cfg.optim, m_plan.total_epochs, m_plan.lr_multiplier);
  m_opt = std::make_unique<optim::Optimizer>(optim::optimizer_options(cfg.optim), m_layout.count);
  m_ema = std::make_unique<optim::Ema>(cfg.optim.ema, m_params.data(),
                                       m_use_ema ? m_layout.count : 0);
}

LocalResult LocalTrainer::run() {
  m_result.run_dir = metrics::create_run_dir(m_cfg.run.dir, m_cfg.run.name, m_cfg.run.overwrite);
  metrics::write_file_atomic(m_result.run_dir / "config.toml", config::to_toml(m_cfg));
  m_steps = std::make_unique<metrics::StepLog>(
      metrics::StepLog::to_file(m_result.run_dir / "steps.jsonl"));
  m_eval_file = std::make_unique<metrics::JsonlWriter>(m_result.run_dir / "eval.jsonl");
  m_eval = std::make_unique<EvalLog>(*m_net, m_data.test, *m_eval_file, m_plan.train_count,
                                     m_use_ema, m_clock);
  spdlog::info("run directory: {}", m_result.run_dir.string());
  spdlog::info("model {} ({} parameters), backend {} with {} thread(s), batch {}, {} steps "
               "({:.2f} epochs)",
               m_spec.name, m_layout.count, m_backend->name(), m_cfg.compute.threads, m_batch,
               m_plan.total_steps, m_sched.total_epochs);
  m_loader = std::make_unique<data::BatchLoader>(m_data.train, m_batch, m_cfg.run.seed, 0, 1,
                                                 m_cfg.data.augment, augment_options(m_cfg));
  const auto total = static_cast<std::int64_t>(m_plan.total_steps);
  m_progress = std::make_unique<metrics::Progress>(total, m_cfg.run.progress_every_steps, m_quiet);
  m_clock.restart();
  for (std::int64_t k = 1; k <= total; ++k) step(k);
  finish();
  return m_result;
}

void LocalTrainer::step(std::int64_t k) {
  const double t_start = m_clock.now();
  m_loader->next();
  const double epoch = static_cast<double>(m_examples) / m_plan.train_count;
  const auto lr = static_cast<float>(optim::learning_rate(m_sched, epoch));
  const float loss = m_net->train_step(m_params.data(), m_loader->images(), m_loader->labels(),
                                       m_batch, m_grad.data());
  if (!std::isfinite(loss)) {
    throw Error(ExitCode::kInternal,
                "loss became " + std::to_string(loss) + " at step " + std::to_string(k) + " (lr " +
                    std::to_string(lr) +
                    "): training diverged; lower optim.lr or use a warmup schedule");
  }
  const double arrival = m_clock.now() - t_start;
  m_opt->step(m_params.data(), m_grad.data(), lr);
  if (m_use_ema) m_ema->update(m_params.data());
  m_examples += m_batch;
  m_loss_avg = k == 1 ? loss : 0.98 * m_loss_avg + 0.02 * loss;

  metrics::StepRecord rec;
  rec.step = static_cast<std::uint64_t>(k);
  rec.version = rec.step - 1;
  rec.t_start = t_start;
  rec.t_apply = m_clock.now();
  rec.lr = lr;
  rec.loss = loss;
  rec.used = 1;
  rec.grads.push_back({0, arrival, rec.version, true, 0, arrival, loss, rec.version});
  m_steps->write(rec);

  const double elapsed = m_clock.now();
  m_progress->update(k, static_cast<double>(m_examples) / m_plan.train_count, m_loss_avg,
                     static_cast<double>(m_examples) / std::max(1e-9, elapsed - m_eval_s),
                     elapsed);
  if (static_cast<std::uint64_t>(k) != m_plan.total_steps && m_timer.due(rec.step, elapsed)) {
    const EvalPoint p = m_eval->run(rec.step, static_cast<std::uint64_t>(m_examples),
                                    m_params.data(), m_use_ema ? m_ema->data() : m_params.data());
    m_eval_s += p.eval_s;
    m_timer.mark(p.wall_s);
    m_progress->note(m_eval->describe(p));
  }
}

// The final evaluation, then the outputs: the parameters, and summary.json
// last, so that a summary on disk means the run is complete.
void LocalTrainer::finish() {
  const EvalPoint p = m_eval->run(m_plan.total_steps, static_cast<std::uint64_t>(m_examples),
                                  m_params.data(), m_use_ema ? m_ema->data() : m_params.data());
  m_eval_s += p.eval_s;
  m_progress->note(m_eval->describe(p));
  m_progress->finish();
  m_steps->flush();

  m_result.steps = static_cast<std::int64_t>(m_plan.total_steps);
  m_result.examples = m_examples;
  m_result.wall_s = m_clock.now();
  m_result.final_eval = p.theta;
  m_result.final_eval_ema = p.ema;
  const double train_s = m_result.wall_s - m_eval_s;
  m_result.examples_per_s = static_cast<double>(m_examples) / std::max(1e-9, train_s);

  // Final parameters, raw float32 in the layout's order (tests compare runs).
  metrics::write_floats(m_result.run_dir / "params.f32", m_params);
  metrics::write_floats(m_result.run_dir / "params_ema.f32",
                        m_use_ema ? std::vector<float>(m_ema->data(), m_ema->data() + m_ema->count())
                                  : m_params);

  // The same analysis as a distributed run's, so `syncopt report` reads both.
  metrics::RunInfo info;
  info.mode = config::Mode::kLocal;
  info.batch = m_batch;
  info.wall_s = m_result.wall_s;
  info.examples = static_cast<std::uint64_t>(m_examples);
  info.epochs = static_cast<double>(m_examples) / m_plan.train_count;
  info.test_loss = p.theta.loss;
  info.test_acc = p.theta.accuracy;
  info.test_loss_ema = p.ema.loss;
  info.test_acc_ema = p.ema.accuracy;
  metrics::write_summary(m_result.run_dir, info,
                         {{"examples_per_s", m_result.examples_per_s},  // without evaluation
                          {"train_s", train_s},
                          {"eval_s", m_eval_s},
                          {"model", m_spec.name},
                          {"params", m_layout.count},
                          {"backend", m_backend->name()},
                          {"threads", m_cfg.compute.threads},
                          {"run_dir", m_result.run_dir.string()}});
}

}  // namespace

LocalResult run_local(const config::Config& cfg, const Compute& compute, bool quiet) {
  if (cfg.run.resume) {
    throw ConfigError("run.resume = true: resuming from a checkpoint is not implemented in this "
                      "version; start a new run (run.resume = false)");
  }
  LocalTrainer trainer(cfg, compute, quiet);
  return trainer.run();
}

}  // namespace syncopt::train
