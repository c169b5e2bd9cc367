// The decision logic of one parameter-server shard, free of MPI so that it
// can be tested exactly: which gradients are accepted or dropped, when an
// update is applied, what it averages, and what the step record says.
//
//   sync:     accept a gradient iff its version equals the shard's version t,
//             its worker has not contributed to step t yet, and fewer than N
//             have been accepted; apply the mean of exactly N (summed in
//             worker order, so the result does not depend on arrival order).
//   timeout:  as sync, but also apply when timeout_s has passed since the
//             first accepted gradient of the step (with >= 1 gradient).
//   async/ssp: apply every gradient on arrival (staleness = t - version).
//   softsync: apply the mean of every c gradients, whatever their version.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace syncopt::ps {

struct GradRecord {
  int worker = 0;
  double arrival_s = 0.0;  // since the step's start
  std::uint64_t version = 0;
  bool accepted = false;
  std::int64_t staleness = 0;
  double compute_s = 0.0;
  float loss = 0.0f;
  std::uint64_t seq = 0;  // the worker's own gradient counter (matches across shards)
};

struct StepRecord {
  std::uint64_t step = 0;     // 1-based index of the update
  std::uint64_t version = 0;  // shard version the update was applied to
  double t_start = 0.0;       // run-relative seconds
  double t_apply = 0.0;
  float lr = 0.0f;
  float loss = 0.0f;          // mean loss of the applied gradients
  int used = 0;               // gradients averaged
  std::vector<GradRecord> grads;
};

enum class Mode { kSync, kTimeout, kAsync, kSsp, kSoftsync };
Mode parse_mode(const std::string& mode);

class ShardCore {
 public:
  // workers: K; n: N (sync/timeout) or c (softsync); count: floats in the slice.
  ShardCore(Mode mode, int workers, int n, std::size_t count, double timeout_s);

  // A gradient from `worker`, computed on `version`, arrived at run time
  // `now`. Accepted ones are kept (copied) for the next update.
  // Returns whether it was accepted.
  bool on_grad(int worker, std::uint64_t version, const float* grad, float loss, double compute_s,
               double now, std::uint64_t seq = 0);

  // Whether an update is due at time `now`.
  bool ready(double now) const;
  // Seconds until a timeout fires (timeout mode with >= 1 accepted), else < 0.
  double time_to_deadline(double now) const;

  // Writes the mean of the accepted gradients into `mean` [count], advances
  // the version, and returns the finished step record (t_apply = now; lr is
  // filled in by the caller). Requires ready().
  StepRecord apply(float* mean, double now);
  // The next step starts at `now` (after the optimiser has run), so that a
  // record's t_apply and the next record's t_start are the same instant.
  void set_step_start(double now) { m_step_start = now; }

  std::uint64_t version() const { return m_version; }
  // Gradients dropped so far, per worker.
  const std::vector<std::int64_t>& drops() const { return m_drops; }
  int pending() const { return m_used; }

 private:
  void record(int worker, std::uint64_t version, bool accepted, std::int64_t staleness,
              double compute_s, float loss, double now, std::uint64_t seq);

  Mode m_mode;
  int m_workers, m_n;
  std::size_t m_count;
  double m_timeout_s;
  std::uint64_t m_version = 0;
  double m_step_start = 0.0;
  double m_first_accept = -1.0;
  std::vector<std::vector<float>> m_slots;  // sync/timeout: one per worker
  std::vector<char> m_contributed;          // sync/timeout: worker already in this step
  std::vector<float> m_sum;                 // async/softsync: running sum
  int m_used = 0;
  double m_loss_sum = 0.0;
  std::vector<std::int64_t> m_drops;
  StepRecord m_current;
};

}  // namespace syncopt::ps
