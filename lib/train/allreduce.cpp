// The allreduce loop (see allreduce.hpp).
#include "train/allreduce.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "checkpoint/checkpoint.hpp"
#include "comm/mpi.hpp"
#include "comm/poll.hpp"
#include "common/error.hpp"
#include "common/signals.hpp"
#include "data/batch.hpp"
#include "optim/optimizer.hpp"
#include "train/inputs.hpp"

namespace syncopt::train {

namespace {

// What every rank tells every other after a step.
struct Report {
  double ready_s = 0.0;    // when its gradient was ready (its "arrival")
  double compute_s = 0.0;  // pure compute
  double loss = 0.0;
  double stop_signal = 0.0;     // a stop signal this rank received, or 0
  double checkpoint_due = 0.0;  // rank 0: time for a periodic checkpoint
};
constexpr int kReportDoubles = 5;

std::string rank_part(int rank) { return "rank" + std::to_string(rank); }

class AllreduceTrainer {
 public:
  explicit AllreduceTrainer(const AllreduceSetup& st);
  AllreduceResult run();

 private:
  void resume();
  bool step(std::uint64_t k);  // false: diverged
  void exchange(const Report& mine);
  void record(std::uint64_t k, double t_start, float lr);
  void save_checkpoint(std::uint64_t k);

  const AllreduceSetup& m_st;
  const config::Config& m_cfg;
  const int m_workers;
  const int m_batch;
  data::BatchLoader m_loader;
  optim::ScheduleOptions m_sched;
  EvalTimer m_timer;
  std::uint64_t m_step = 0, m_examples = 0;
  double m_last_checkpoint_s = 0.0;
  std::vector<Report> m_all;
  std::vector<float> m_theta, m_ema;  // rank 0: host copies for evaluation
  std::string m_diverged;
};

AllreduceTrainer::AllreduceTrainer(const AllreduceSetup& st)
    : m_st(st),
      m_cfg(*st.cfg),
      m_workers(st.roles->workers),
      m_batch(static_cast<int>(st.cfg->train.batch)),
      m_loader(*st.train, m_batch, st.cfg->run.seed, st.rank, st.roles->workers,
               st.cfg->data.augment, augment_options(*st.cfg)),
      m_sched(optim::schedule_options(st.cfg->optim, st.plan->total_epochs)),
      m_timer(st.cfg->eval),
      m_all(static_cast<std::size_t>(m_workers)) {
  static_assert(sizeof(Report) == kReportDoubles * sizeof(double));
}

AllreduceResult AllreduceTrainer::run() {
  if (m_cfg.run.resume) resume();
  AllreduceResult out;
  for (std::uint64_t k = m_step + 1; k <= m_st.plan->total_steps; ++k) {
    if (!step(k)) {
      out.diverged = m_diverged;
      break;
    }
    const auto stop =
        std::max_element(m_all.begin(), m_all.end(), [](const Report& a, const Report& b) {
          return a.stop_signal < b.stop_signal;
        })->stop_signal;
    const bool last = k == m_st.plan->total_steps;
    if (stop != 0.0 && !last) {
      out.stop_signal = static_cast<int>(stop);
      save_checkpoint(k);
      break;
    }
    const bool by_steps = m_cfg.run.checkpoint_every_steps > 0 &&
                          k % static_cast<std::uint64_t>(m_cfg.run.checkpoint_every_steps) == 0;
    if (!last && (by_steps || m_all[0].checkpoint_due != 0.0)) save_checkpoint(k);
  }
  if (out.stop_signal == 0 && out.diverged.empty() && m_step == m_st.plan->total_steps &&
      checkpoint::latest_step(m_st.run_dir) != m_step) {
    save_checkpoint(m_step);
  }
  out.steps = m_step;
  out.examples = m_examples;
  if (m_st.rank == 0) {
    out.theta.resize(m_st.replica->count());
    out.ema.resize(m_st.replica->count());
    m_st.replica->copy_theta(out.theta.data());
    m_st.replica->copy_ema(out.ema.data());
  }
  return out;
}

bool AllreduceTrainer::step(std::uint64_t k) {
  const RunClock& clock = *m_st.clock;
  const double t_start = clock.now();
  m_loader.next();
  Report mine;
  mine.loss = m_st.replica->compute_gradient(m_loader.images(), m_loader.labels(), m_batch);
  mine.compute_s = clock.now() - t_start;
  comm::sleep_s(m_st.stragglers->delay_s(m_st.rank, k - 1, mine.compute_s));
  mine.ready_s = clock.now() - t_start;
  m_st.replica->reduce_gradient(*m_st.reducer);
  const double epoch = static_cast<double>(m_examples) / m_st.plan->train_count;
  const auto lr = static_cast<float>(optim::learning_rate(m_sched, epoch) *
                                     m_st.roles->rule.lr_multiplier(m_st.roles->rule.n));
  // Every rank holds the same reduced gradient, so every rank decides alike.
  if (!m_st.replica->gradient_finite()) {
    m_diverged = "training diverged: the mean gradient of step " + std::to_string(k) +
                 " is not finite (lr " + std::to_string(lr) +
                 "); nothing non-finite was saved, the last checkpoint is kept. Lower optim.lr "
                 "or use a warmup schedule";
    if (m_st.rank == 0) spdlog::error("{}", m_diverged);
    return false;
  }
  m_st.replica->apply(lr);
  m_examples += static_cast<std::uint64_t>(m_st.plan->examples_per_update);
  m_step = k;
  mine.stop_signal = stop_signal();
  mine.checkpoint_due = m_st.rank == 0 && m_cfg.run.checkpoint_every_s > 0.0 &&
                                clock.now() - m_last_checkpoint_s >= m_cfg.run.checkpoint_every_s
                            ? 1.0
                            : 0.0;
  exchange(mine);
  if (m_st.rank == 0) record(k, t_start, lr);
  return true;
}

void AllreduceTrainer::exchange(const Report& mine) {
  SYNCOPT_CHECK_MPI(MPI_Allgather(&mine, kReportDoubles, MPI_DOUBLE, m_all.data(), kReportDoubles,
                                  MPI_DOUBLE, m_st.comm));
}

// Rank 0 records when each rank's gradient was ready, shows progress, and
// evaluates when due.
void AllreduceTrainer::record(std::uint64_t k, double t_start, float lr) {
  const RunClock& clock = *m_st.clock;
  metrics::StepRecord rec;
  rec.step = k;
  rec.version = k - 1;
  rec.t_start = t_start;
  rec.lr = lr;
  rec.used = m_workers;
  double loss_sum = 0.0;
  for (int w = 0; w < m_workers; ++w) {
    const Report& r = m_all[static_cast<std::size_t>(w)];
    rec.grads.push_back(
        {w, r.ready_s, k - 1, true, 0, r.compute_s, static_cast<float>(r.loss), k - 1});
    loss_sum += r.loss;
  }
  rec.loss = static_cast<float>(loss_sum / m_workers);
  rec.t_apply = clock.now();
  m_st.steps_log->write(rec);
  const double now = clock.now();
  m_st.progress->update(
      static_cast<std::int64_t>(k), static_cast<double>(m_examples) / m_st.plan->train_count,
      loss_sum / m_workers, static_cast<double>(m_examples) / std::max(1e-9, now), now);
  if (k != m_st.plan->total_steps && m_timer.due(k, now)) {
    m_theta.resize(m_st.replica->count());
    m_ema.resize(m_st.replica->count());
    m_st.replica->copy_theta(m_theta.data());
    m_st.replica->copy_ema(m_ema.data());
    const EvalPoint p = m_st.eval->run(k, m_examples, m_theta.data(), m_ema.data());
    m_timer.mark(p.wall_s);
    m_st.progress->note(m_st.eval->describe(p));
  }
}

// Every rank writes its loader's part; rank 0 also the replica (the same on
// every rank) and where the records end, then commits once all are written.
void AllreduceTrainer::save_checkpoint(std::uint64_t k) {
  const double t0 = m_st.clock->now();
  checkpoint::State mine;
  mine.put_child("loader", m_loader.state());
  checkpoint::write_part(m_st.run_dir, k, rank_part(m_st.rank), mine);
  if (m_st.rank == 0) {
    m_st.steps_log->flush();
    m_st.eval_file->flush();
    checkpoint::State s;
    s.put("step", k);
    s.put("examples", m_examples);
    s.put("wall_s", t0);
    s.put("eval_timer_s", m_timer.last());
    s.put_child("replica", m_st.replica->state());
    s.put("steps_bytes", m_st.steps_log->bytes());
    s.put("eval_bytes", m_st.eval_file->bytes());
    checkpoint::write_part(m_st.run_dir, k, "run", s);
  }
  SYNCOPT_CHECK_MPI(MPI_Barrier(m_st.comm));
  if (m_st.rank == 0) {
    std::vector<std::string> parts{"run"};
    for (int r = 0; r < m_workers; ++r) parts.push_back(rank_part(r));
    checkpoint::commit(m_st.run_dir, k, parts);
    checkpoint::prune(m_st.run_dir, static_cast<std::size_t>(m_cfg.run.keep_checkpoints));
  }
  m_last_checkpoint_s = m_st.clock->now();
  spdlog::debug("checkpoint at step {} in {:.3f}s", k, m_last_checkpoint_s - t0);
}

void AllreduceTrainer::resume() {
  const auto ck = checkpoint::load_latest(m_st.run_dir, {"run", rank_part(m_st.rank)});
  const auto& s = ck.part("run");
  m_step = s.get<std::uint64_t>("step");
  m_examples = s.get<std::uint64_t>("examples");
  m_timer.mark(s.get<double>("eval_timer_s"));
  m_st.replica->restore(s.child("replica"));
  m_loader.restore(ck.part(rank_part(m_st.rank)).child("loader"));
  m_st.clock->restart(s.get<double>("wall_s"));
  m_last_checkpoint_s = s.get<double>("wall_s");
}

}  // namespace

AllreduceResult run_allreduce(const AllreduceSetup& setup) {
  AllreduceTrainer t(setup);
  return t.run();
}

}  // namespace syncopt::train
