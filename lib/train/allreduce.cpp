// The allreduce loop (see allreduce.hpp).
#include "train/allreduce.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "checkpoint/checkpoint.hpp"
#include "checkpoint/parts.hpp"
#include "comm/collective.hpp"
#include "comm/flight.hpp"
#include "comm/mpi.hpp"
#include "comm/poll.hpp"
#include "comm/protocol.hpp"
#include "common/error.hpp"
#include "common/signals.hpp"
#include "data/batch.hpp"
#include "optim/optimizer.hpp"
#include "rundir/meta.hpp"
#include "rundir/open.hpp"
#include "train/inputs.hpp"
#include "train/reshape.hpp"
#include "worker/budget.hpp"
#include "worker/compute_model.hpp"

namespace syncopt::train {

namespace {

// What every rank tells every other after a step.
struct Report {
  double ready_s = 0.0;    // when its gradient was ready (its "arrival")
  double compute_s = 0.0;  // pure compute
  double loss = 0.0;
  double stop_signal = 0.0;     // a stop signal this rank received, or 0
  double checkpoint_due = 0.0;  // rank 0: time for a periodic checkpoint
  // Micro-batches (train.micro_batch): the examples it computed, and its
  // seconds per example (compute and straggler time), which "auto" budgets
  // are chosen from.
  double examples = 0.0;
  double per_example_s = 0.0;
  // Its phases (docs/outputs.md grads[].phases): loading the batch, and
  // the reduction (waiting for the others among it); compute is the rest
  // of ready_s.
  double data_s = 0.0;
  double reduce_s = 0.0;
};
constexpr int kReportDoubles = 9;

// The buffers of the per-step exchange. A nonblocking collective that is
// given up (a rank died) may still use them, so they are then kept for the
// rest of the process (comm/collective.hpp).
struct Exchange {
  Report mine;
  std::vector<Report> all;
};

// Rank 0: `ranks` died or ended with an error (`code`, from `from`, or 0
// when they were found silent).
struct RanksLost {
  std::vector<int> ranks;
  ExitCode code = ExitCode::kUnavailable;
  bool silent = true;
};

class AllreduceTrainer {
 public:
  explicit AllreduceTrainer(const AllreduceSetup& st);
  ~AllreduceTrainer();
  AllreduceResult run();

 private:
  void resume();
  bool step(std::uint64_t k);  // false: diverged
  void load_batch(std::uint64_t k);
  worker::Slowdown compute_slowdown(std::uint64_t k) const;
  void compute_whole(std::uint64_t k, double t_start);
  void compute_micro(std::uint64_t k, double t_start);
  double now() const;
  bool finished() const;
  void exchange();
  comm::flight::Ticket collective(std::uint16_t what, std::uint64_t k, std::size_t bytes) const;
  void wait(MPI_Request& req);
  void check_peers();
  void record(std::uint64_t k, double t_start, float lr);
  void save_checkpoint(std::uint64_t k);
  void save_alone(std::uint64_t k);
  void end_without(const RanksLost& lost, AllreduceResult& out);
  std::string rank_name(int rank) const;

  const AllreduceSetup& m_st;
  const config::Config& m_cfg;
  const int m_workers;
  const int m_batch;
  const bool m_virtual;  // train.clock = virtual: modelled times, nothing slept
  data::BatchLoader m_loader;
  worker::ComputeBudget m_budget;
  worker::StragglerPacer m_pacer;
  double m_vnow = 0.0;  // virtual clock: where this rank is in modelled time
  optim::ScheduleOptions m_sched;
  EvalTimer m_timer;
  std::uint64_t m_step = 0, m_examples = 0;
  double m_last_checkpoint_s = 0.0;
  // Rank 0 of a resumed run: every rank's loader as resumed, at step
  // m_resumed_at (save_alone moves them on from there: after a reshape a
  // loader holds a carry that a fresh one would not).
  std::vector<checkpoint::State> m_resumed_loaders;
  std::uint64_t m_resumed_at = 0;
  std::unique_ptr<Exchange> m_x;
  std::vector<float> m_theta, m_ema;  // rank 0: host copies for evaluation
  std::string m_diverged;
};

AllreduceTrainer::AllreduceTrainer(const AllreduceSetup& st)
    : m_st(st),
      m_cfg(*st.cfg),
      m_workers(st.roles->workers),
      m_batch(static_cast<int>(st.cfg->train.batch)),
      m_virtual(st.cfg->train.clock == config::Clock::kVirtual),
      m_loader(*st.train, m_batch, st.cfg->run.seed, st.rank, st.roles->workers,
               st.cfg->data.augment, augment_options(*st.cfg)),
      m_budget(st.cfg->train),
      m_sched(optim::schedule_options(st.cfg->optim, st.plan->total_epochs)),
      m_timer(st.cfg->eval),
      m_x(std::make_unique<Exchange>()) {
  static_assert(sizeof(Report) == kReportDoubles * sizeof(double));
  m_x->all.resize(static_cast<std::size_t>(m_workers));
  if (m_st.watch != nullptr) {
    m_st.reducer->set_wait_hook([this] { check_peers(); }, m_cfg.cluster.dead_after_s + 1.0);
  }
}

AllreduceTrainer::~AllreduceTrainer() {
  // A reduction given up leaves its hook pointing here: not called again,
  // but not left dangling either.
  if (m_st.watch != nullptr) m_st.reducer->set_wait_hook(nullptr, 0.0);
}

AllreduceResult AllreduceTrainer::run() {
  if (m_cfg.run.resume) resume();
  AllreduceResult out;
  try {
    for (std::uint64_t k = m_step + 1; !finished(); ++k) {
      if (!step(k)) {
        out.diverged = m_diverged;
        break;
      }
      const auto& all = m_x->all;
      const auto stop =
          std::max_element(all.begin(), all.end(), [](const Report& a, const Report& b) {
            return a.stop_signal < b.stop_signal;
          })->stop_signal;
      const bool last = finished();
      if (stop != 0.0 && !last) {
        out.stop_signal = static_cast<int>(stop);
        save_checkpoint(k);
        break;
      }
      const bool by_steps = m_cfg.run.checkpoint_every_steps > 0 &&
                            k % static_cast<std::uint64_t>(m_cfg.run.checkpoint_every_steps) == 0;
      if (!last && (by_steps || all[0].checkpoint_due != 0.0)) save_checkpoint(k);
    }
    if (out.stop_signal == 0 && out.diverged.empty() && finished() &&
        checkpoint::latest_step(m_st.run_dir) != m_step) {
      save_checkpoint(m_step);
    }
  } catch (const RanksLost& lost) {
    // Only rank 0 throws this: the others end when rank 0 tells them, or
    // when rank 0 is silent (UnavailableError).
    end_without(lost, out);
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

// Whether the run has made its last update: train.steps updates, or, when
// an update may carry fewer examples than K batches (a compute budget),
// train.epochs of examples computed (the same count on every rank).
bool AllreduceTrainer::finished() const {
  const auto target = m_st.plan->target_examples;
  return target > 0 ? m_examples >= target : m_step >= m_st.plan->total_steps;
}

// The run's time: the wall clock, or where this rank is in modelled time.
double AllreduceTrainer::now() const { return m_virtual ? m_vnow : m_st.clock->now(); }

// The next batch; a straggler slow at its data (stragglers.phase = data)
// sleeps its slowdown of the loading here (wall clock only).
void AllreduceTrainer::load_batch(std::uint64_t k) {
  const double t0 = m_st.clock->now();
  m_loader.next();
  if (m_virtual) return;
  if (m_cfg.stragglers.phase == config::StragglerPhase::kData) {
    comm::sleep_s(m_st.stragglers->slowdown(m_st.rank, k - 1).late_s(m_st.clock->now() - t0, 1.0));
  }
  m_x->mine.data_s = m_st.clock->now() - t0;
}

// The slowdown of this step's compute: the straggler's, unless it is slow
// at its data (which the virtual clock models as compute all the same).
worker::Slowdown AllreduceTrainer::compute_slowdown(std::uint64_t k) const {
  if (!m_virtual && m_cfg.stragglers.phase == config::StragglerPhase::kData) return {};
  return m_st.stragglers->slowdown(m_st.rank, k - 1);
}

// The whole batch at once; a straggler's slowdown slept after it (it is
// one piece of work), or, under the virtual clock, added to its time.
void AllreduceTrainer::compute_whole(std::uint64_t k, double t_start) {
  Report& mine = m_x->mine;
  load_batch(k);
  const double t_compute = m_st.clock->now();
  mine.loss = m_st.replica->compute_gradient(m_loader.images(), m_loader.labels(), m_batch);
  if (m_virtual) {
    mine.compute_s = worker::modelled_compute_s(m_cfg.sim, m_st.rank, k - 1);
    mine.ready_s = mine.compute_s + m_st.stragglers->delay_s(m_st.rank, k - 1, mine.compute_s);
    return;
  }
  mine.compute_s = m_st.clock->now() - t_compute;
  comm::sleep_s(compute_slowdown(k).late_s(mine.compute_s, 1.0));
  mine.ready_s = m_st.clock->now() - t_start;
}

// Micro-batches (docs/design.md §3): while the budget allows, the next
// micro-batch's gradient into the step's sum; a straggler is slow at each
// (worker::StragglerPacer, by examples). Under the virtual clock micro-batch
// i takes the modelled compute of the batch times its share of the
// examples, and its lateness is added, not slept.
void AllreduceTrainer::compute_micro(std::uint64_t k, double t_start) {
  Report& mine = m_x->mine;
  load_batch(k);
  const double modelled = m_virtual ? worker::modelled_compute_s(m_cfg.sim, m_st.rank, k - 1) : 0.0;
  const auto per_image = static_cast<std::size_t>(m_st.train->image_size());
  m_pacer.start(compute_slowdown(k));
  const double t_compute = m_virtual ? 0.0 : m_st.clock->now();
  double work = 0.0, loss = 0.0, elapsed = 0.0, last = 0.0;
  int done = 0;
  do {
    const int first = m_budget.examples_of(done);
    const int m = m_budget.size_of(done);
    const double t0 = m_virtual ? elapsed : m_st.clock->now();
    loss += static_cast<double>(m) *
            m_st.replica->accumulate_gradient(m_loader.images() + per_image * first,
                                              m_loader.labels() + first, m, done == 0);
    const double phi = static_cast<double>(first + m) / m_batch;
    if (m_virtual) {
      work += modelled * m / m_batch;
      (void)m_pacer.due_s(work, phi);
      elapsed = work + m_pacer.slept_s();
      last = elapsed - t0;
    } else {
      work = m_st.clock->now() - t_compute - m_pacer.slept_s();
      comm::sleep_s(m_pacer.due_s(work, phi));
      elapsed = m_st.clock->now() - t_start;
      last = m_st.clock->now() - t0;
    }
    ++done;
  } while (m_budget.next(done, elapsed, last));
  const int examples = m_budget.examples_of(done);
  mine.loss = loss / examples;
  mine.examples = examples;
  mine.compute_s = work;
  mine.ready_s = elapsed;
  mine.per_example_s = (work + m_pacer.slept_s()) / examples;
}

// A step: compute, average the gradients, tell each other how it went, and
// only then apply, so that a rank lost at any point of a step leaves every
// live rank's parameters at the same, last completed step.
bool AllreduceTrainer::step(std::uint64_t k) {
  const double t_start = now();
  Report& mine = m_x->mine;
  mine = Report{};
  if (m_budget.micro()) {
    compute_micro(k, t_start);
  } else {
    compute_whole(k, t_start);
  }
  const double t_reduce = m_st.clock->now();
  const auto ticket = collective(comm::flight::kAllreduce, k, m_st.replica->count() * 4);
  const double examples = m_budget.micro()
                              ? m_st.replica->reduce_gradient_sum(*m_st.reducer, mine.examples)
                              : m_st.plan->examples_per_update;
  if (!m_budget.micro()) m_st.replica->reduce_gradient(*m_st.reducer);
  comm::flight::done(ticket);
  mine.reduce_s = m_virtual ? 0.0 : m_st.clock->now() - t_reduce;
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
  mine.stop_signal = stop_signal();
  comm::flight::poll_signal();  // a SIGUSR2: dumped between steps (and in a collective's wait)
  mine.checkpoint_due =
      m_st.rank == 0 && m_cfg.run.checkpoint_every_s > 0.0 &&
              m_st.clock->now() - m_last_checkpoint_s >= m_cfg.run.checkpoint_every_s
          ? 1.0
          : 0.0;
  exchange();
  m_st.replica->apply(lr);
  m_examples += static_cast<std::uint64_t>(std::llround(examples));
  m_step = k;
  std::vector<double> paces;
  double ready = 0.0;
  for (const Report& r : m_x->all) {
    paces.push_back(r.per_example_s);
    ready = std::max(ready, r.ready_s);
  }
  m_budget.observe(paces);
  // Virtual clock: the step ends when the last rank's gradient is ready,
  // plus the update (sim.apply_ms); the allreduce itself is not modelled.
  if (m_virtual) m_vnow = t_start + ready + m_cfg.sim.apply_ms / 1000.0;
  if (m_st.rank == 0) record(k, t_start, lr);
  return true;
}

void AllreduceTrainer::exchange() {
  if (m_st.watch == nullptr) {
    SYNCOPT_CHECK_MPI(MPI_Allgather(&m_x->mine, kReportDoubles, MPI_DOUBLE, m_x->all.data(),
                                    kReportDoubles, MPI_DOUBLE, m_st.comm));
    return;
  }
  MPI_Request req = MPI_REQUEST_NULL;
  const auto ticket =
      collective(comm::flight::kAllgather, m_step + 1, kReportDoubles * sizeof(double));
  SYNCOPT_CHECK_MPI(MPI_Iallgather(&m_x->mine, kReportDoubles, MPI_DOUBLE, m_x->all.data(),
                                   kReportDoubles, MPI_DOUBLE, m_st.comm, &req));
  wait(req);
  comm::flight::done(ticket);
}

// A collective of step k in the flight recorder (every rank its peer).
comm::flight::Ticket AllreduceTrainer::collective(std::uint16_t what, std::uint64_t k,
                                                  std::size_t bytes) const {
  if (!comm::flight::on()) return comm::flight::kNone;
  comm::flight::About a;
  a.kind = what;
  a.version = k;
  a.bytes = bytes;
  return comm::flight::posted(comm::flight::Op::kCollective, a);
}

void AllreduceTrainer::wait(MPI_Request& req) {
  try {
    comm::wait_collective(
        req, [this] { check_peers(); }, m_cfg.cluster.dead_after_s + 1.0);
  } catch (...) {
    (void)m_x.release();  // NOLINT: deliberate leak, MPI may still use it
    m_x = std::make_unique<Exchange>();
    m_x->all.resize(static_cast<std::size_t>(m_workers));
    throw;
  }
}

// While a collective waits: a rank found dead, or one that ended the run
// and said so. Rank 0 gives up the step (RanksLost); another rank ends at
// once when rank 0 is gone or tells it to.
void AllreduceTrainer::check_peers() {
  const double now = m_st.clock->now();
  const auto dead = m_st.watch->poll(now);
  for (const auto& n : m_st.watch->notices()) {
    if (n.kind != comm::Kind::kEnding) continue;
    if (m_st.rank != 0) {
      throw EndedByPeerError(static_cast<ExitCode>(n.code),
                             "ends with exit " + std::to_string(n.code) + ": " + rank_name(0) +
                                 " ended the run; see its message");
    }
    throw RanksLost{{n.from}, static_cast<ExitCode>(n.code), false};
  }
  if (dead.empty()) return;
  if (m_st.rank != 0) {
    throw UnavailableError("rank " + std::to_string(m_st.rank) + ": " + rank_name(0) +
                           " has been silent for " +
                           std::to_string(static_cast<int>(now - m_st.watch->last_heard(0))) +
                           "s (cluster.dead_after_s): allreduce cannot go on without it");
  }
  throw RanksLost{dead, ExitCode::kUnavailable, true};
}

std::string AllreduceTrainer::rank_name(int rank) const {
  return m_st.peers != nullptr ? comm::describe_rank(*m_st.peers, rank)
                               : "rank " + std::to_string(rank);
}

// Rank 0, a rank lost: the others are told to end, the last step every rank
// applied is saved, and the run ends with the rank's code (69: silent).
void AllreduceTrainer::end_without(const RanksLost& lost, AllreduceResult& out) {
  const double now = m_st.clock->now();
  std::string names;
  for (const int r : lost.ranks) names += (names.empty() ? "" : ", ") + rank_name(r);
  for (const int r : m_st.watch->peers()) {
    if (std::find(lost.ranks.begin(), lost.ranks.end(), r) != lost.ranks.end()) continue;
    if (m_st.watch->alive(r))
      m_st.watch->notify(r, comm::Kind::kEnding, static_cast<std::uint32_t>(lost.code), m_step,
                         lost.ranks);
  }
  std::string saved = "no checkpoint could be saved";
  try {
    save_alone(m_step);
    saved = "a checkpoint of step " + std::to_string(m_step) + " is saved";
  } catch (const Error& e) {
    spdlog::error("the checkpoint of step {} could not be saved: {}", m_step, e.what());
  }
  out.lost = lost.ranks;
  out.failed_code = lost.code;
  out.reported_by = lost.silent ? 0 : lost.ranks.front();
  if (lost.silent) {
    const double silent = now - m_st.watch->last_heard(lost.ranks.front());
    out.failed = names + " has been silent for " + std::to_string(static_cast<int>(silent)) +
                 "s (cluster.dead_after_s = " + std::to_string(m_cfg.cluster.dead_after_s) +
                 "): allreduce cannot go on without it at step " + std::to_string(m_step + 1) +
                 "; " + saved + ": resume with every rank and --set run.resume=true";
  } else {
    out.failed = names + " ended the run with exit " + std::to_string(static_cast<int>(lost.code)) +
                 " at step " + std::to_string(m_step + 1) + " (see its message); " + saved;
  }
  for (const int r : lost.ranks) {
    const auto& peer = (*m_st.peers)[static_cast<std::size_t>(r)];
    out.lost_workers.push_back(
        {{"worker", r},
         {"rank", r},
         {"host", peer.host},
         {"pid", peer.pid},
         {"step", m_step},
         {"reason",
          lost.silent ? "silent for " +
                            std::to_string(static_cast<int>(now - m_st.watch->last_heard(r))) + "s"
                      : "ended with exit " + std::to_string(static_cast<int>(lost.code))}});
  }
  spdlog::error("{}", out.failed);
  if (!m_st.watch->flush(1.0)) spdlog::warn("some ranks did not take the notice to end");
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
  double loss_sum = 0.0, weighted = 0.0, examples = 0.0;
  for (int w = 0; w < m_workers; ++w) {
    const Report& r = m_x->all[static_cast<std::size_t>(w)];
    rec.grads.push_back(
        {w, r.ready_s, k - 1, true, 0, r.compute_s, static_cast<float>(r.loss), k - 1});
    loss_sum += r.loss;
    if (m_budget.micro()) {
      rec.grads.back().examples = static_cast<std::int64_t>(r.examples);
      rec.grads.back().skipped = m_batch - static_cast<std::int64_t>(r.examples);
      weighted += r.loss * r.examples;
      examples += r.examples;
    }
    if (!m_virtual) {
      auto& ph = rec.grads.back().phases;
      ph.set(metrics::Phase::kData, r.data_s);
      ph.set(metrics::Phase::kCompute, r.ready_s - r.data_s);
      ph.set(metrics::Phase::kReduce, r.reduce_s);
    }
  }
  // With micro-batches the loss of the update is over the examples computed.
  const double loss = m_budget.micro() ? weighted / examples : loss_sum / m_workers;
  rec.loss = static_cast<float>(loss);
  rec.t_apply = m_virtual ? m_vnow : clock.now();
  if (m_virtual) rec.clock = "virtual";
  m_st.steps_log->write(rec);
  const double now = clock.now();
  m_st.progress->update(static_cast<std::int64_t>(k),
                        static_cast<double>(m_examples) / m_st.plan->train_count, loss,
                        static_cast<double>(m_examples) / std::max(1e-9, now), now);
  if (!finished() && m_timer.due(k, now)) {
    m_theta.resize(m_st.replica->count());
    m_ema.resize(m_st.replica->count());
    m_st.replica->copy_theta(m_theta.data());
    m_st.replica->copy_ema(m_ema.data());
    const EvalPoint p = m_st.eval->run(k, m_examples, m_theta.data(), m_ema.data());
    m_timer.mark(p.wall_s);
    m_st.progress->note(m_st.eval->describe(p));
  }
}

// Rank 0's part of checkpoint k: the replica (the same on every rank), the
// position in the run and where the records end.
checkpoint::State run_part(std::uint64_t k, std::uint64_t examples, double wall_s,
                           double eval_timer_s, const replica::Replica& replica,
                           metrics::StepLog& steps, metrics::JsonlWriter& eval_file) {
  steps.flush();
  eval_file.flush();
  checkpoint::State s;
  s.put("step", k);
  s.put("examples", examples);
  s.put("wall_s", wall_s);
  s.put("eval_timer_s", eval_timer_s);
  s.put_child("replica", replica.state());
  s.put("steps_bytes", steps.bytes());
  s.put("eval_bytes", eval_file.bytes());
  return s;
}

// Every rank writes its loader's part; rank 0 also the replica (the same on
// every rank) and where the records end, then commits once all are written.
void AllreduceTrainer::save_checkpoint(std::uint64_t k) {
  const double t0 = m_st.clock->now();
  checkpoint::State mine;
  mine.put_child("loader", m_loader.state());
  checkpoint::write_part(m_st.run_dir, k, checkpoint::rank_part(m_st.rank), mine);
  if (m_st.rank == 0) {
    checkpoint::State part = run_part(k, m_examples, t0, m_timer.last(), *m_st.replica,
                                      *m_st.steps_log, *m_st.eval_file);
    if (m_virtual) part.put("virtual_s", m_vnow);
    checkpoint::write_part(m_st.run_dir, k, checkpoint::kRunPart, part);
  }
  if (m_st.watch == nullptr) {
    SYNCOPT_CHECK_MPI(MPI_Barrier(m_st.comm));
  } else {
    MPI_Request req = MPI_REQUEST_NULL;
    const auto ticket = collective(comm::flight::kBarrier, k, 0);
    SYNCOPT_CHECK_MPI(MPI_Ibarrier(m_st.comm, &req));
    wait(req);
    comm::flight::done(ticket);
  }
  if (m_st.rank == 0) {
    std::vector<std::string> parts{checkpoint::kRunPart};
    for (int r = 0; r < m_workers; ++r) parts.push_back(checkpoint::rank_part(r));
    checkpoint::commit(m_st.run_dir, k, parts,
                       rundir::checkpoint_stamp(m_cfg, rundir::describe_layout(*m_st.roles)));
    checkpoint::prune(m_st.run_dir, static_cast<std::size_t>(m_cfg.run.keep_checkpoints));
  }
  m_last_checkpoint_s = m_st.clock->now();
  spdlog::debug("checkpoint at step {} in {:.3f}s", k, m_last_checkpoint_s - t0);
}

// Rank 0 alone, when a rank is lost: checkpoint k with every rank's part.
// Every rank has taken exactly k batches by step k, so each one's loader
// position is a fresh loader moved on by k batches (BatchLoader::skip), or
// of a resumed run its loader as resumed moved on by k minus the step
// resumed, the same state the rank itself would have saved.
void AllreduceTrainer::save_alone(std::uint64_t k) {
  if (k == 0 || checkpoint::latest_step(m_st.run_dir) == k) return;
  checkpoint::CheckpointWriter w(m_st.run_dir, k);
  checkpoint::State run = run_part(k, m_examples, m_st.clock->now(), m_timer.last(), *m_st.replica,
                                   *m_st.steps_log, *m_st.eval_file);
  if (m_virtual) run.put("virtual_s", m_vnow);
  w.add(checkpoint::kRunPart, run);
  for (int r = 0; r < m_workers; ++r) {
    data::BatchLoader loader(*m_st.train, m_batch, m_cfg.run.seed, r, m_workers, m_cfg.data.augment,
                             augment_options(m_cfg));
    if (m_resumed_loaders.empty()) {
      loader.skip(k);
    } else {
      loader.restore(m_resumed_loaders[static_cast<std::size_t>(r)]);
      loader.skip(k - m_resumed_at);
    }
    checkpoint::State part;
    part.put_child("loader", loader.state());
    w.add(checkpoint::rank_part(r), part);
  }
  w.stamp(rundir::checkpoint_stamp(m_cfg, rundir::describe_layout(*m_st.roles)));
  w.commit();
  checkpoint::prune(m_st.run_dir, static_cast<std::size_t>(m_cfg.run.keep_checkpoints));
}

void AllreduceTrainer::resume() {
  // A checkpoint of another rank count: the loaders continued (reshape.hpp).
  Shape shape;
  shape.roles = m_st.roles;
  shape.batch = m_batch;
  shape.train_count = m_st.train->count;
  shape.seed = m_cfg.run.seed;
  std::vector<std::string> parts{checkpoint::kRunPart, checkpoint::rank_part(m_st.rank)};
  for (int r = 1; m_st.rank == 0 && r < m_workers; ++r) parts.push_back(checkpoint::rank_part(r));
  const auto ck = load_for_shape(m_st.run_dir, shape, parts);
  if (m_st.rank == 0) {
    m_resumed_at = ck.step;
    for (int r = 0; r < m_workers; ++r) {
      m_resumed_loaders.push_back(ck.part(checkpoint::rank_part(r)).child("loader"));
    }
  }
  const auto& s = ck.part(checkpoint::kRunPart);
  m_step = s.get<std::uint64_t>("step");
  m_examples = s.get<std::uint64_t>("examples");
  m_timer.mark(s.get<double>("eval_timer_s"));
  m_st.replica->restore(s.child("replica"));
  m_loader.restore(ck.part(checkpoint::rank_part(m_st.rank)).child("loader"));
  m_st.clock->restart(s.get<double>("wall_s"));
  // Virtual clock: where the run was in modelled time (an "auto" budget
  // starts afresh: its last 20 steps are not saved).
  if (m_virtual && s.has("virtual_s")) m_vnow = s.get<double>("virtual_s");
  m_last_checkpoint_s = s.get<double>("wall_s");
  if (m_st.watch != nullptr) m_st.watch->restart_timers(m_st.clock->now());
}

}  // namespace

AllreduceResult run_allreduce(const AllreduceSetup& setup) {
  AllreduceTrainer t(setup);
  return t.run();
}

}  // namespace syncopt::train
