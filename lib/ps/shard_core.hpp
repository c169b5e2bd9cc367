// The decision logic of one parameter-server shard, free of MPI so that it
// can be tested exactly: which gradients are accepted or dropped, when an
// update is applied, what it averages, what the step record says, and when
// a worker's request for parameters may be answered.
//
//   sync:     accept a gradient iff its version equals the shard's version t
//             and its worker has not contributed to step t yet; the N-th
//             makes the update due (ready()), and the caller applies it
//             before the next gradient, which is then late (one decision
//             point for the first-N cutoff; on_grad() while an update is due
//             is an InternalError). The mean of exactly N is summed in worker
//             order, so the result does not depend on arrival order.
//   timeout:  as sync, but also apply when timeout_s has passed since the
//             first accepted gradient of the step (with >= 1 gradient).
//   async/ssp: apply every gradient on arrival (staleness = t - version).
//   softsync: apply the mean of every c gradients, whatever their version.
//
// With the virtual clock (train.clock = virtual; sync and timeout) every
// worker lives on a modelled time line: answered at virtual time A, it
// finishes its gradient at F = A + compute + straggler delay (the worker
// sends F), and the core takes the gradients in the order of F, not in the
// order they really arrive, exactly as `syncopt simulate` takes them with
// no network and an event-driven shard: the first N fresh ones make the
// update due at the N-th's F (timeout: also at the first's F + timeout_s),
// which ends apply_s later at T; a fresh gradient answers at T, a late one
// (F past the cutoff) is dropped and answered at max(F, T of the version
// current then) with that version. So a dropped straggler stays busy until
// its computation ends and starts its next one from there, as in a real
// run. Gradients are taken conservatively: one that finishes at F waits
// until every worker still computing was answered no earlier than F (so
// none can finish before it); a worker waiting for an answer cannot send.
// An update is applied only once every answer owed for the version before
// it was sent (answered()), so each worker gets the version it is owed.
// Decisions, means and records are a pure function of the seeds: bitwise
// repeatable for any b, whatever the machine does.
//
// The pipelined exchange (docs/design.md §4) hands a gradient over in
// buckets. In sync, timeout and softsync the shard loop assembles them in
// slot(worker) and hands over the whole gradient when its last bucket is in
// (one decision per gradient, as without the pipeline). In async and ssp
// every bucket is applied on arrival by the loop (the paper's per-layer
// apply); on_bucket() keeps each bucket's own version and measures its
// staleness, and the last bucket (bucket 0, the slice's first layers)
// completes the gradient: on_grad(..., nullptr, ...) records it with every
// bucket's staleness and apply(nullptr, ...) counts it. The shard's version
// is then bucket 0's.
//
// Answering a pull (a worker asking for parameters newer than `v`):
//   sync/timeout: once the shard's version t > v (one gradient per worker
//             per step; a late worker is answered at once);
//   ssp:      Ho et al.'s stale synchronous parallel clock bound: a worker
//             that has pushed c_w gradients is answered iff
//             c_w - min over live workers of c_v <= ssp_bound;
//   async/softsync: at once.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/state.hpp"
#include "config/mode.hpp"
#include "metrics/step_record.hpp"

namespace syncopt::ps {

using metrics::GradRecord;
using metrics::StepRecord;

class ShardCore {
 public:
  // mode: a parameter-server mode; workers: K; n: N (sync/timeout) or c
  // (softsync); count: floats in the slice; ssp_bound: s of ssp.
  ShardCore(config::Mode mode, int workers, int n, std::size_t count, double timeout_s,
            std::int64_t ssp_bound = 0);

  // A gradient from `worker`, computed on `version`, arrived at run time
  // `now`. Accepted ones are kept (copied) for the next update.
  // Returns whether it was accepted (virtual clock: queued, and decided
  // once its finish time is reached; `vtime` is that finish time).
  // `oldest`: the oldest version the worker held of any shard (the leader
  // of agreeing shards accepts only a gradient fresh on every shard).
  bool on_grad(int worker, std::uint64_t version, const float* grad, float loss, double compute_s,
               double now, std::uint64_t seq = 0, double vtime = 0.0,
               std::uint64_t oldest = kEveryShard);
  static constexpr std::uint64_t kEveryShard = ~std::uint64_t{0};
  // The phases of `worker`'s step that made its gradient number `seq`
  // (from the GRAD that completes it), attached to that gradient's record
  // when it is made (docs/outputs.md grads[].phases). Call before on_grad.
  void set_phases(int worker, std::uint64_t seq, const metrics::PhaseTimes& phases);
  // Where the loop may assemble `worker`'s gradient before on_grad(), which
  // then copies nothing (sync, timeout: the worker's own slot); nullptr in
  // the other modes.
  float* slot(int worker);

  // Async and ssp, bucketed: the slice is `buckets` buckets, each applied on
  // arrival (see above).
  void use_buckets(int buckets);
  int buckets() const { return static_cast<int>(m_bucket_version.size()) + 1; }
  // Bucket `bucket` of `worker`'s gradient, computed on that bucket's
  // `version` (as the worker read it), is being applied now: its
  // staleness, counted into the gradient's record. Buckets > 0 advance
  // their own version here; bucket 0's is the shard's, advanced by apply().
  std::int64_t on_bucket(int worker, int bucket, std::uint64_t version);
  // The version bucket `bucket` holds (the one a PARAMS of it carries):
  // the shard's, except for buckets > 0 applied on arrival.
  std::uint64_t bucket_version(int bucket) const {
    return bucket == 0 || m_bucket_version.empty()
               ? m_version
               : m_bucket_version[static_cast<std::size_t>(bucket - 1)];
  }
  // Several shards agree and this one decides (shard 0).
  void lead();

  // The virtual clock (see above): every update takes `apply_s` of modelled
  // time after its last accepted gradient. Only for sync and timeout.
  void use_virtual_clock(double apply_s);
  bool virtual_clock() const { return m_virtual; }
  // Virtual clock: the answer to `worker`'s request was sent (a no-op on the
  // wall clock). Gradients wait for it before the next update is applied.
  void answered(int worker);
  // Virtual clock: (version, F - that version's start) of every gradient
  // taken since the last call, in the order taken (adaptive b's arrivals,
  // the same on every shard and in every run).
  std::vector<std::pair<std::uint64_t, double>> take_arrivals();

  // Several shards, wall clock (sync, timeout): shard 0 decides which
  // workers an update averages and the others follow, so that every shard
  // applies the same N workers. A follower keeps every fresh gradient of
  // its version and applies once decide() named the set for that version
  // and every named (live) worker's gradient is in.
  void follow_leader();
  void decide(std::uint64_t version, std::vector<int> workers);

  // Whether an update is due at time `now`; when it is, apply() must come
  // before the next on_grad().
  bool ready(double now) const;
  // Seconds until a timeout fires (timeout mode with >= 1 accepted), else < 0.
  double time_to_deadline(double now) const;

  // Writes the mean of the accepted gradients into `mean` [count], advances
  // the version, and returns the finished step record (t_apply = now, or the
  // virtual time; lr is filled in by the caller; used = gradients averaged).
  // Requires ready(). mean = nullptr (async bucketed: the loop applied
  // every bucket itself) only records and counts the update.
  StepRecord apply(float* mean, double now);
  // apply() in pieces, for a loop that applies its slice bucket by bucket:
  // begin_apply() closes the step (the record; the version advances),
  // average() writes the mean of mean[offset, offset + count) and returns
  // whether it is all finite, end_apply() comes after the last range (and
  // every range of a softsync sum must be averaged once). No other call in
  // between. The same bits as apply().
  StepRecord begin_apply(double now);
  bool average(float* mean, std::size_t offset, std::size_t count);
  void end_apply();
  // Whether the mean the last apply() wrote is all finite (checked in the
  // same pass, so divergence detection costs no extra read of the vector).
  bool mean_finite() const { return m_mean_finite; }
  // The next step starts at `now` (after the optimiser has run), so that a
  // record's t_apply and the next record's t_start are the same instant.
  void set_step_start(double now) {
    if (!m_virtual) m_step_start = now;
  }

  // The SSP clock: `worker` pushed one more gradient (counted whether or
  // not it is still applied, e.g. after the last update).
  void on_push(int worker);
  // `worker` will send nothing more (done, or dead): it no longer holds
  // the slowest clock back.
  void retire(int worker);
  // Whether `worker`'s request for parameters newer than `wanted` may be
  // answered now (comm::kAnyVersion: at once). See the rules above.
  bool may_answer(int worker, std::uint64_t wanted) const;

  std::uint64_t version() const { return m_version; }
  // The N of the next update (adaptive b), 1..K.
  void set_n(int n) { m_n = n; }
  int n() const { return m_n; }
  double step_start() const { return m_step_start; }
  // Gradients dropped so far, per worker.
  const std::vector<std::int64_t>& drops() const { return m_drops; }
  int pending() const { return m_used; }
  const std::vector<std::int64_t>& clocks() const { return m_clock; }

  // Training state for a checkpoint taken between updates: the version,
  // drops and SSP clocks. Gradients already accepted for the next update
  // are not part of it (their workers send them again after a resume).
  checkpoint::State state() const;
  void restore(const checkpoint::State& s);

 private:
  // Appends a gradient's record to the current step (arrival from the step's start).
  metrics::GradRecord& add_grad(int worker, std::uint64_t version, double arrival_s,
                                double compute_s, float loss, std::uint64_t seq);
  void record(int worker, std::uint64_t version, bool accepted, std::int64_t staleness,
              double compute_s, float loss, double now, std::uint64_t seq);
  bool on_deferred_grad(int worker, std::uint64_t version, const float* grad, float loss,
                        double compute_s, double now, std::uint64_t seq);
  // The workers an update averages when the choice is deferred to apply():
  // the leader's set (follower).
  std::vector<int> choose_deferred() const;
  bool deferred() const { return m_follower; }
  // Virtual clock: queue a gradient finishing at `vtime`, take what can be
  // taken in the order of finish times, and the bookkeeping of answers.
  void on_virtual_grad(int worker, std::uint64_t version, const float* grad, float loss,
                       double compute_s, std::uint64_t seq, double vtime);
  void take_virtual();
  void take_one_virtual(int worker);
  void owe_answer(int worker, double at);
  // Enough gradients for an update (N; one in async and ssp).
  bool full() const;

  config::Mode m_mode;
  bool m_versioned;
  int m_workers, m_n;
  std::size_t m_count;
  double m_timeout_s;
  std::int64_t m_ssp_bound;
  std::uint64_t m_version = 0;
  double m_step_start = 0.0;
  double m_first_accept = -1.0;
  std::vector<std::vector<float>> m_slots;  // sync/timeout: one per worker
  std::vector<char> m_contributed;          // sync/timeout: worker already in this step
  std::vector<float> m_sum;                 // async/softsync: running sum
  int m_used = 0;
  int m_averaging = 0;  // between begin_apply() and end_apply(): the gradients averaged
  double m_loss_sum = 0.0;
  std::vector<std::int64_t> m_drops;
  std::vector<std::int64_t> m_clock;  // gradients pushed, per worker (ssp)
  std::vector<char> m_retired;
  bool m_virtual = false;
  bool m_mean_finite = true;
  // Per worker: the phases of its latest gradient, and that gradient's seq.
  std::vector<std::pair<std::uint64_t, metrics::PhaseTimes>> m_phases;
  double m_apply_s = 0.0;
  // Virtual clock: where each worker is on its time line.
  enum class VState : std::uint8_t {
    kComputing,  // answered at `at`: its next gradient finishes after it
    kQueued,     // its gradient (finishing at `at`) is in, not yet taken
    kWaiting,    // taken, its answer not yet decided (a contributor: at the update)
    kGone,       // retired
  };
  struct VWorker {
    VState state = VState::kComputing;
    bool owed = false;  // an answer is decided and not yet sent
    double at = 0.0;
    std::uint64_t version = 0, seq = 0;
    float loss = 0.0f;
    double compute_s = 0.0;
  };
  std::vector<VWorker> m_vw;
  int m_owed = 0;                            // answers decided and not yet sent
  bool m_due = false;                        // the next update is due (at m_cutoff)
  double m_cutoff = 0.0;                     // its virtual time: the N-th finish, or the deadline
  std::map<std::uint64_t, double> m_vstart;  // recent versions' virtual starts
  std::vector<std::pair<std::uint64_t, double>> m_arrivals;
  bool m_follower = false;
  bool m_leader = false;
  std::map<std::uint64_t, std::vector<int>> m_decided;  // follower: version -> workers
  StepRecord m_current;
  // Async bucketed: versions of buckets 1.. (bucket 0's is m_version), and
  // per worker the staleness of each bucket of its gradient so far.
  std::vector<std::uint64_t> m_bucket_version;
  std::vector<std::vector<std::int64_t>> m_layer_staleness;
};

}  // namespace syncopt::ps
