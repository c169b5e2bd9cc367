// The single-process training loop (see local.hpp).
#include "train/local.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/parts.hpp"
#include "common/clock.hpp"
#include "common/error.hpp"
#include "common/signals.hpp"
#include "data/batch.hpp"
#include "layout/roles.hpp"
#include "metrics/analysis.hpp"
#include "metrics/records.hpp"
#include "metrics/run_board.hpp"
#include "metrics/step_record.hpp"
#include "optim/optimizer.hpp"
#include "replica/replica.hpp"
#include "replica/staleness.hpp"
#include "rundir/ending.hpp"
#include "rundir/lock.hpp"
#include "train/inputs.hpp"
#include "train/memory_check.hpp"

namespace syncopt::train {

namespace {

constexpr const char* kPart = checkpoint::kLocalPart;

// train.simulated_staleness as the replica layer's options; the draws use
// stragglers.seed, or run.seed when that is 0.
replica::StalenessOptions staleness_options(const config::Config& cfg) {
  replica::StalenessOptions o;
  o.mean = cfg.train.simulated_staleness;
  switch (cfg.train.staleness_dist) {
    case config::StalenessDist::kFixed:
      o.dist = replica::StalenessDist::kFixed;
      break;
    case config::StalenessDist::kUniform:
      o.dist = replica::StalenessDist::kUniform;
      break;
    case config::StalenessDist::kGeometric:
    case config::StalenessDist::kExponential:
      o.dist = replica::StalenessDist::kGeometric;
      break;
  }
  o.max = cfg.train.staleness_max;
  o.seed = cfg.stragglers.seed != 0 ? cfg.stragglers.seed : cfg.run.seed;
  return o;
}

class LocalTrainer {
 public:
  LocalTrainer(const config::Config& cfg, const Compute& compute, bool quiet,
               const rundir::Invocation& inv);
  LocalResult run();

 private:
  std::uint64_t open_outputs();
  void train_from(std::uint64_t first);
  void step(std::uint64_t k);
  void save_checkpoint(std::uint64_t k);
  void restore(const checkpoint::State& s);
  void finish(const rundir::Outcome& outcome);
  void write_summary(const rundir::Outcome& outcome);

  const config::Config& m_cfg;
  const rundir::Invocation& m_inv;
  const int m_batch;
  const bool m_use_ema;
  const bool m_quiet;
  data::TrainTest m_data;
  nn::ModelSpec m_spec;
  nn::ParamLayout m_layout;
  std::unique_ptr<nn::Backend> m_backend;
  std::unique_ptr<nn::Network> m_net;
  std::unique_ptr<replica::Replica> m_replica;
  layout::Plan m_plan;
  optim::ScheduleOptions m_sched;
  double m_lr_multiplier = 1.0;
  std::unique_ptr<data::BatchLoader> m_loader;
  // Simulated staleness (null when off): the draws and θ_{t-max} .. θ_t.
  std::unique_ptr<replica::StalenessModel> m_stale;
  std::unique_ptr<replica::ParamHistory> m_history;

  LocalResult m_result;
  rundir::RunLock m_lock;        // the run directory is this process's
  rundir::RunJournal m_journal;  // run.json
  std::unique_ptr<metrics::StepLog> m_steps;
  std::unique_ptr<metrics::JsonlWriter> m_eval_file;
  std::unique_ptr<EvalLog> m_eval;
  std::unique_ptr<metrics::Progress> m_progress;
  RunClock m_clock;
  EvalTimer m_timer;
  std::vector<float> m_theta, m_ema;  // host copies, when needed
  std::uint64_t m_step = 0;           // updates done
  double m_eval_s = 0.0;              // time spent evaluating, excluded from throughput
  double m_loss_avg = 0.0;
  double m_last_checkpoint_s = 0.0;
  std::uint64_t m_examples = 0;
};

// Everything that can fail on input happens before any output exists.
LocalTrainer::LocalTrainer(const config::Config& cfg, const Compute& compute, bool quiet,
                           const rundir::Invocation& inv)
    : m_cfg(cfg),
      m_inv(inv),
      m_batch(static_cast<int>(cfg.train.batch)),
      m_use_ema(cfg.optim.ema > 0.0),
      m_quiet(quiet),
      m_timer(cfg.eval) {
  check_memory(cfg, Holds::kTrainer, 1);  // before anything is allocated
  if (cfg.stragglers.model != config::StragglerModel::kNone) {
    // Shared configs switch modes with --set train.mode=local: say so, do not refuse.
    spdlog::warn(
        "stragglers.model = \"{}\" has no effect in train.mode = \"local\" (one process, "
        "no workers to delay); it is ignored",
        config::enum_name(cfg.stragglers.model));
  }
  const RunClock load_clock;
  m_data = data::load(load_options(cfg));
  spdlog::info("data: {} train / {} test examples of {}x{}x{}, {} classes ({:.2f}s)",
               m_data.train.count, m_data.test.count, m_data.train.channels, m_data.train.height,
               m_data.train.width, m_data.train.classes, load_clock.now());
  if (m_data.train.count < m_batch) {
    throw ConfigError("train.batch = " + std::to_string(m_batch) + " is larger than the " +
                      std::to_string(m_data.train.count) +
                      " training examples; lower train.batch or raise data.limit_train");
  }
  m_spec = model_spec(cfg, m_data.train);
  m_layout = nn::param_layout(m_spec);
  m_backend = compute.make_backend(0);
  m_net = m_backend->make_network(m_spec, std::max<int>(m_batch, static_cast<int>(cfg.eval.batch)));
  std::vector<float> init(m_layout.count);
  nn::init_params(m_spec, m_layout, init.data(), cfg.run.seed);
  m_replica = compute.make_replica(*m_net, init.data(), m_layout.count,
                                   {optim::optimizer_options(cfg.optim), cfg.optim.ema});
  const auto roles = layout::make_roles(cfg, 1);
  m_plan = layout::make_plan(cfg, roles, m_data.train.count);
  m_sched = optim::schedule_options(cfg.optim, m_plan.total_epochs);
  m_lr_multiplier = roles.rule.lr_multiplier(roles.rule.n);
  m_loader = std::make_unique<data::BatchLoader>(m_data.train, m_batch, cfg.run.seed, 0, 1,
                                                 cfg.data.augment, augment_options(cfg));
  m_theta.resize(m_layout.count);
  m_ema.resize(m_layout.count);
  if (cfg.train.simulated_staleness > 0) {
    m_stale = std::make_unique<replica::StalenessModel>(staleness_options(cfg));
    m_history = std::make_unique<replica::ParamHistory>(
        static_cast<std::size_t>(m_stale->max()) + 1, m_layout.count);
    m_replica->copy_theta(m_history->push(0));  // θ_0; a resumed run replaces the history
    spdlog::info(
        "simulated staleness: {} with mean {} (at most {}), a history of {} parameter "
        "vectors ({:.1f} MB)",
        config::to_string(cfg.train.staleness_dist), cfg.train.simulated_staleness, m_stale->max(),
        m_history->depth(), static_cast<double>(m_history->nbytes()) / 1e6);
  }
}

LocalResult LocalTrainer::run() {
  std::uint64_t first = 0;
  try {
    first = open_outputs();
  } catch (const Error& e) {
    // An attempt that never trained: run.json says so (when this process
    // got the directory), summary.json stays the run's last.
    m_journal.finish(rundir::Outcome::failed(e));
    rundir::write_outcome_file(rundir::Outcome::failed(e), m_inv.launch_id, m_result.run_dir);
    throw;
  }
  try {
    train_from(first);
  } catch (const Error& e) {
    // Records stay as they are (the last checkpoint is intact); the summary
    // says how the run ended.
    write_summary(rundir::Outcome::failed(e));
    throw;
  }
  return m_result;
}

// A new run, or the state of the latest checkpoint; returns the next step.
std::uint64_t LocalTrainer::open_outputs() {
  stops_at_step_boundaries();  // from here a stop is a checkpoint (docs/design.md §10)
  m_result.run_dir = std::filesystem::path(m_cfg.run.dir) / m_cfg.run.name;
  rundir::OpenedRun opened = rundir::open_run_dir(m_cfg, rundir::this_process(m_inv.launch_id));
  m_lock = std::move(opened.lock);
  const auto& dir = m_result.run_dir;
  m_journal = rundir::RunJournal(dir, m_cfg.run.name, m_inv, {{}, layout::make_roles(m_cfg, 1)},
                                 m_cfg.run.resume);
  double wall_s = 0.0;
  if (m_cfg.run.resume) {
    const auto changed = rundir::check_resume(m_cfg, dir, 1, m_inv.launch_id);
    if (!changed.empty()) {
      m_journal.note("changed", changed);
      for (const auto& c : changed) spdlog::info("resumed with {}", c);
    }
    const checkpoint::Checkpoint ck = checkpoint::load_latest(dir, {kPart});
    const checkpoint::State& s = ck.part(kPart);
    restore(s);
    rundir::rewrite_config(m_cfg, dir);
    wall_s = s.get<double>("wall_s");
    const auto& rec = s.child("records");
    m_steps = std::make_unique<metrics::StepLog>(
        metrics::StepLog::resume_file(dir / "steps.jsonl", rec.get<std::uint64_t>("steps_bytes")));
    m_eval_file = std::make_unique<metrics::JsonlWriter>(
        metrics::JsonlWriter::resume_at(dir / "eval.jsonl", rec.get<std::uint64_t>("eval_bytes")));
    spdlog::info("resumed {} from its checkpoint at step {} ({:.1f}s of training)", dir.string(),
                 m_step, wall_s);
  } else {
    m_steps = std::make_unique<metrics::StepLog>(metrics::StepLog::to_file(dir / "steps.jsonl"));
    m_eval_file = std::make_unique<metrics::JsonlWriter>(dir / "eval.jsonl");
  }
  m_eval = std::make_unique<EvalLog>(*m_net, m_data.test, *m_eval_file, m_plan.train_count,
                                     m_use_ema, m_clock);
  m_eval->set_batch_norm_set(m_data.train, m_batch, static_cast<int>(m_cfg.eval.bn_batches),
                             m_cfg.run.seed);
  // One TensorBoard file for the steps and evaluations (tb/, see run_board.hpp).
  const auto board = metrics::open_run_board(m_cfg.run, dir, "steps", m_clock);
  if (board) board->describe_run(m_cfg, rundir::describe_invocation(m_inv));
  m_steps->set_board(board);
  m_eval->set_board(board);
  spdlog::info("run directory: {}", dir.string());
  spdlog::info(
      "model {} ({} parameters), backend {} with {} thread(s), batch {}, {} steps "
      "({:.2f} epochs)",
      m_spec.name(), m_layout.count, m_backend->name(), m_cfg.compute.threads, m_batch,
      m_plan.total_steps, m_sched.total_epochs);
  m_progress = std::make_unique<metrics::Progress>(static_cast<std::int64_t>(m_plan.total_steps),
                                                   m_cfg.run.progress_every_steps, m_quiet,
                                                   m_cfg.run.progress);
  m_clock.restart(wall_s);
  m_last_checkpoint_s = wall_s;
  return m_step + 1;
}

void LocalTrainer::train_from(std::uint64_t first) {
  const auto& run = m_cfg.run;
  for (std::uint64_t k = first; k <= m_plan.total_steps; ++k) {
    step(k);
    if (const int sig = stop_signal(); sig != 0 && k < m_plan.total_steps) {
      m_progress->note("stopping at step " + std::to_string(k) + " on " + signal_name(sig) +
                       ": saving a checkpoint");
      save_checkpoint(k);
      finish(rundir::Outcome::stopped(sig, k));
      return;
    }
    const bool by_steps = run.checkpoint_every_steps > 0 &&
                          k % static_cast<std::uint64_t>(run.checkpoint_every_steps) == 0;
    const bool by_time = run.checkpoint_every_s > 0.0 &&
                         m_clock.now() - m_last_checkpoint_s >= run.checkpoint_every_s;
    if ((by_steps || by_time) && k < m_plan.total_steps) save_checkpoint(k);
  }
  if (m_step == m_plan.total_steps && checkpoint::latest_step(m_result.run_dir) != m_step) {
    save_checkpoint(m_step);  // the end of the run, resumable for a longer one
  }
  finish(rundir::Outcome{});
}

void LocalTrainer::step(std::uint64_t k) {
  const double t_start = m_clock.now();
  m_loader->next();
  const double epoch = static_cast<double>(m_examples) / m_plan.train_count;
  const auto lr = static_cast<float>(optim::learning_rate(m_sched, epoch) * m_lr_multiplier);
  // The update turns version k-1 into k; with simulated staleness its
  // gradient is computed on θ_{k-1-s}.
  const std::uint64_t version = k - 1;
  const std::int64_t s = m_stale ? m_stale->at(version) : 0;
  const float loss =
      m_history
          ? m_replica->compute_gradient_at(m_history->at(version - static_cast<std::uint64_t>(s)),
                                           m_loader->images(), m_loader->labels(), m_batch)
          : m_replica->compute_gradient(m_loader->images(), m_loader->labels(), m_batch);
  if (!std::isfinite(loss) || !m_replica->gradient_finite()) {
    throw Error(ExitCode::kInternal,
                "training diverged: the loss at step " + std::to_string(k) + " is " +
                    std::to_string(loss) + " (lr " + std::to_string(lr) +
                    "); nothing non-finite was saved, the last checkpoint is kept. Lower "
                    "optim.lr or use a warmup schedule");
  }
  const double arrival = m_clock.now() - t_start;
  m_replica->apply(lr);
  if (m_history) m_replica->copy_theta(m_history->push(k));
  m_examples += static_cast<std::uint64_t>(m_batch);
  m_step = k;
  m_loss_avg = k == 1 ? loss : 0.98 * m_loss_avg + 0.02 * loss;

  metrics::StepRecord rec;
  rec.step = k;
  rec.version = version;
  rec.t_start = t_start;
  rec.t_apply = m_clock.now();
  rec.lr = lr;
  rec.loss = loss;
  rec.used = 1;
  rec.grads.push_back(
      {0, arrival, version - static_cast<std::uint64_t>(s), true, s, arrival, loss, version});
  m_steps->write(rec);

  const double elapsed = m_clock.now();
  m_progress->update(static_cast<std::int64_t>(k),
                     static_cast<double>(m_examples) / m_plan.train_count, m_loss_avg,
                     static_cast<double>(m_examples) / std::max(1e-9, elapsed - m_eval_s), elapsed);
  if (k != m_plan.total_steps && m_timer.due(k, elapsed)) {
    m_replica->copy_theta(m_theta.data());
    m_replica->copy_ema(m_ema.data());
    const EvalPoint p = m_eval->run(k, m_examples, m_theta.data(), m_ema.data());
    m_eval_s += p.eval_s;
    m_timer.mark(p.wall_s);
    m_progress->note(m_eval->describe(p));
  }
}

// Everything resuming needs: the replica, the loader, the position in the
// run, the clocks, and how far the records go.
void LocalTrainer::save_checkpoint(std::uint64_t k) {
  const double t0 = m_clock.now();
  m_steps->flush();
  m_eval_file->flush();
  checkpoint::State s;
  s.put("step", k);
  s.put("examples", m_examples);
  s.put("wall_s", t0);
  s.put("eval_s", m_eval_s);
  s.put("loss_avg", m_loss_avg);
  s.put("eval_timer_s", m_timer.last());
  s.put_child("replica", m_replica->state());
  s.put_child("loader", m_loader->state());
  if (m_history) s.put_child("staleness_history", m_history->state());
  checkpoint::State rec;
  rec.put("steps_bytes", m_steps->bytes());
  rec.put("eval_bytes", m_eval_file->bytes());
  s.put_child("records", std::move(rec));
  checkpoint::CheckpointWriter w(m_result.run_dir, k);
  w.add(kPart, s);
  w.stamp(rundir::checkpoint_stamp(m_cfg, rundir::describe_layout(layout::make_roles(m_cfg, 1))));
  w.commit();
  checkpoint::prune(m_result.run_dir, static_cast<std::size_t>(m_cfg.run.keep_checkpoints));
  m_last_checkpoint_s = m_clock.now();
  spdlog::debug("checkpoint at step {} in {:.3f}s", k, m_last_checkpoint_s - t0);
}

void LocalTrainer::restore(const checkpoint::State& s) {
  m_step = s.get<std::uint64_t>("step");
  m_examples = s.get<std::uint64_t>("examples");
  m_eval_s = s.get<double>("eval_s");
  m_loss_avg = s.get<double>("loss_avg");
  m_timer.mark(s.get<double>("eval_timer_s"));
  m_replica->restore(s.child("replica"));
  m_loader->restore(s.child("loader"));
  if (m_history) {
    if (!s.has("staleness_history")) {
      throw ConfigError("the checkpoint at step " + std::to_string(m_step) +
                        " was saved without train.simulated_staleness, so it has no parameter "
                        "history to resume with; resume with train.simulated_staleness = 0");
    }
    m_history->restore(s.child("staleness_history"));
    if (m_history->newest() != m_step) {
      throw DataError(s.field_error("staleness_history",
                                    "ends at version " + std::to_string(m_history->newest()) +
                                        ", the checkpoint is at step " + std::to_string(m_step)));
    }
  }
  if (m_step > m_plan.total_steps) {
    throw ConfigError("the run reached step " + std::to_string(m_step) +
                      " (its latest checkpoint), past this launch's " +
                      std::to_string(m_plan.total_steps) +
                      " steps: to extend it, raise train.steps (or train.epochs)");
  }
}

// The end of training (completed) or of this part of it (stopped): the
// final evaluation when completed, the parameters, and summary.json last,
// so that a summary on disk means everything else is there.
void LocalTrainer::finish(const rundir::Outcome& outcome) {
  m_replica->copy_theta(m_theta.data());
  m_replica->copy_ema(m_ema.data());
  m_progress->finish();  // before the final note, which would erase a live line
  if (outcome.status() == RunStatus::kCompleted) {
    const EvalPoint p = m_eval->run(m_plan.total_steps, m_examples, m_theta.data(), m_ema.data());
    m_eval_s += p.eval_s;
    m_progress->note(m_eval->describe(p));
    m_result.final_eval = p.theta;
    m_result.final_eval_ema = p.ema;
    m_result.evaluated = true;
  }
  m_steps->flush();
  m_eval_file->flush();
  m_result.outcome = outcome;
  m_result.steps = static_cast<std::int64_t>(m_step);
  m_result.examples = static_cast<std::int64_t>(m_examples);
  m_result.wall_s = m_clock.now();
  m_result.examples_per_s =
      static_cast<double>(m_examples) / std::max(1e-9, m_result.wall_s - m_eval_s);
  // Final parameters, raw float32 in the layout's order (tests compare runs).
  metrics::write_floats(m_result.run_dir / "params.f32", m_theta);
  metrics::write_floats(m_result.run_dir / "params_ema.f32", m_ema);
  write_summary(outcome);
}

// The same analysis as a distributed run's, so `syncopt report` reads both.
void LocalTrainer::write_summary(const rundir::Outcome& outcome) {
  metrics::RunInfo info;
  info.mode = config::Mode::kLocal;
  info.batch = m_batch;
  info.wall_s = m_clock.now();
  info.examples = m_examples;
  info.epochs = static_cast<double>(m_examples) / m_plan.train_count;
  info.evaluated = m_result.evaluated;
  info.test_loss = m_result.final_eval.loss;
  info.test_acc = m_result.final_eval.accuracy;
  info.test_loss_ema = m_result.final_eval_ema.loss;
  info.test_acc_ema = m_result.final_eval_ema.accuracy;
  const double train_s = info.wall_s - m_eval_s;
  nlohmann::json extra = {{"examples_per_s", m_examples / std::max(1e-9, train_s)},
                          {"train_s", train_s},
                          {"eval_s", m_eval_s},
                          {"model", m_spec.name()},
                          {"params", m_layout.count},
                          {"backend", m_backend->name()},
                          {"threads", m_cfg.compute.threads},
                          {"run_dir", m_result.run_dir.string()}};
  if (m_stale) {
    extra["simulated_staleness"] = {{"mean", m_cfg.train.simulated_staleness},
                                    {"dist", config::to_string(m_cfg.train.staleness_dist)},
                                    {"max", m_stale->max()},
                                    {"history_nbytes", m_history->nbytes()}};
  }
  extra.update(outcome.to_json());
  extra["launch_id"] = m_inv.launch_id;
  extra["run_id"] = m_journal.run_id();
  m_journal.finish(outcome);
  rundir::write_outcome_file(outcome, m_inv.launch_id, m_result.run_dir);
  if (outcome.status() == RunStatus::kFailed) {
    try {
      m_steps->flush();
      metrics::write_summary(m_result.run_dir, info, extra);
    } catch (const std::exception&) {
      rundir::write_failure_summary(m_result.run_dir, outcome);
    }
    return;
  }
  metrics::write_summary(m_result.run_dir, info, extra);
}

}  // namespace

LocalResult run_local(const config::Config& cfg, const Compute& compute, bool quiet,
                      const rundir::Invocation& inv) {
  LocalTrainer trainer(cfg, compute, quiet, inv);
  return trainer.run();
}

}  // namespace syncopt::train
