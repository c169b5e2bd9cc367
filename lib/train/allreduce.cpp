// The allreduce loop (see allreduce.hpp).
#include "train/allreduce.hpp"

#include <algorithm>

#include "comm/mpi.hpp"
#include "comm/poll.hpp"
#include "data/batch.hpp"
#include "optim/optimizer.hpp"
#include "train/inputs.hpp"

namespace syncopt::train {

namespace {

class AllreduceTrainer {
 public:
  explicit AllreduceTrainer(const AllreduceSetup& st);
  AllreduceResult run();

 private:
  void step(std::uint64_t k);
  void record(std::uint64_t k, double t_start, float lr, double ready_s, double compute_s,
              float loss);

  const AllreduceSetup& m_st;
  const config::Config& m_cfg;
  const int m_workers;
  const int m_batch;
  const bool m_use_ema;
  data::BatchLoader m_loader;
  std::vector<float> m_theta, m_grad;
  optim::Optimizer m_opt;
  optim::Ema m_ema;
  optim::ScheduleOptions m_sched;
  EvalTimer m_timer;
  std::uint64_t m_examples = 0;
  std::vector<double> m_mine, m_all;  // (ready_s, compute_s, loss) per rank
};

AllreduceTrainer::AllreduceTrainer(const AllreduceSetup& st)
    : m_st(st), m_cfg(*st.cfg), m_workers(st.roles->workers),
      m_batch(static_cast<int>(st.cfg->train.batch)), m_use_ema(st.cfg->optim.ema > 0.0),
      m_loader(*st.train, m_batch, st.cfg->run.seed, st.rank, st.roles->workers,
               st.cfg->data.augment, augment_options(*st.cfg)),
      m_theta(st.initial, st.initial + st.count), m_grad(st.count),
      m_opt(optim::optimizer_options(st.cfg->optim), st.count),
      m_ema(m_use_ema ? st.cfg->optim.ema : 0.0, m_theta.data(), st.count),
      m_sched(optim::schedule_options(st.cfg->optim, st.plan->total_epochs,
                                      st.plan->lr_multiplier)),
      m_timer(st.cfg->eval), m_mine(3), m_all(static_cast<std::size_t>(3 * m_workers)) {}

AllreduceResult AllreduceTrainer::run() {
  for (std::uint64_t k = 1; k <= m_st.plan->total_steps; ++k) step(k);
  AllreduceResult out;
  out.examples = m_examples;
  out.ema = m_use_ema ? std::vector<float>(m_ema.data(), m_ema.data() + m_st.count) : m_theta;
  out.theta = std::move(m_theta);
  return out;
}

void AllreduceTrainer::step(std::uint64_t k) {
  const RunClock& clock = *m_st.clock;
  const double t_start = clock.now();
  m_loader.next();
  const float loss = m_st.net->train_step(m_theta.data(), m_loader.images(), m_loader.labels(),
                                          m_batch, m_grad.data());
  const double compute_s = clock.now() - t_start;
  comm::sleep_s(m_st.stragglers->delay_s(m_st.rank, k - 1, compute_s));
  const double ready_s = clock.now() - t_start;
  m_st.reducer->mean(m_grad.data(), m_st.count);
  const double epoch = static_cast<double>(m_examples) / m_st.plan->train_count;
  const auto lr = static_cast<float>(optim::learning_rate(m_sched, epoch));
  m_opt.step(m_theta.data(), m_grad.data(), lr);
  if (m_use_ema) m_ema.update(m_theta.data());
  m_examples += static_cast<std::uint64_t>(m_st.plan->examples_per_update);
  record(k, t_start, lr, ready_s, compute_s, loss);
}

// Rank 0 records when each rank's gradient was ready (its "arrival"),
// shows progress, and evaluates when due.
void AllreduceTrainer::record(std::uint64_t k, double t_start, float lr, double ready_s,
                              double compute_s, float loss) {
  m_mine = {ready_s, compute_s, static_cast<double>(loss)};
  SYNCOPT_CHECK_MPI(
      MPI_Gather(m_mine.data(), 3, MPI_DOUBLE, m_all.data(), 3, MPI_DOUBLE, 0, m_st.comm));
  if (m_st.rank != 0) return;
  const RunClock& clock = *m_st.clock;
  metrics::StepRecord rec;
  rec.step = k;
  rec.version = k - 1;
  rec.t_start = t_start;
  rec.lr = lr;
  rec.used = m_workers;
  double loss_sum = 0.0;
  for (int w = 0; w < m_workers; ++w) {
    const auto i = static_cast<std::size_t>(3 * w);
    rec.grads.push_back({w, m_all[i], k - 1, true, 0, m_all[i + 1],
                         static_cast<float>(m_all[i + 2]), k - 1});
    loss_sum += m_all[i + 2];
  }
  rec.loss = static_cast<float>(loss_sum / m_workers);
  rec.t_apply = clock.now();
  m_st.steps_log->write(rec);
  const double now = clock.now();
  m_st.progress->update(static_cast<std::int64_t>(k),
                        static_cast<double>(m_examples) / m_st.plan->train_count,
                        loss_sum / m_workers,
                        static_cast<double>(m_examples) / std::max(1e-9, now), now);
  if (k != m_st.plan->total_steps && m_timer.due(k, now)) {
    const EvalPoint p =
        m_st.eval->run(k, m_examples, m_theta.data(), m_use_ema ? m_ema.data() : m_theta.data());
    m_timer.mark(p.wall_s);
    m_st.progress->note(m_st.eval->describe(p));
  }
}

}  // namespace

AllreduceResult run_allreduce(const AllreduceSetup& setup) {
  AllreduceTrainer t(setup);
  return t.run();
}

}  // namespace syncopt::train
