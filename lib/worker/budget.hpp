// The compute budget of allreduce (train.compute_budget_ms with
// train.micro_batch; docs/design.md §3), free of MPI and of the clock, so
// that the allreduce loop (wall or virtual clock) and the simulator decide
// alike: which micro-batches a rank computes in a step, and, for "auto",
// the budget of the next step from the ranks' recent per-example times.
//
// A rank's batch of B examples is cut into M = ceil(B / m) micro-batches of
// m examples (the last one takes what is left). It computes micro-batch 0,
// then each next one while, at the pace of the last one (its seconds per
// example), the next would end within the budget of the step's start. So a
// rank that keeps its pace never overruns the budget by more than its
// first micro-batch; a rank that slows down within a step may (its last
// micro-batch is measured, not foreseen).
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
#include <vector>

#include "config/config.hpp"

namespace syncopt::worker {

class ComputeBudget {
 public:
  // The steps of per-example times "auto" looks back on, and how close to
  // the best rate the chosen budget must be.
  static constexpr std::size_t kWindow = 20;
  static constexpr double kRateSlack = 0.01;
  // Candidate budgets "auto" weighs, at most (spread over the sorted
  // candidates, so that a thousand simulated ranks stay cheap).
  static constexpr std::size_t kCandidates = 64;

  explicit ComputeBudget(const config::TrainConfig& train);

  bool micro() const { return m_micro > 0; }  // micro-batches at all
  int micro_batches() const { return m_count; }
  // Examples of micro-batch i (0-based).
  int size_of(int i) const;
  // Examples of the first n micro-batches.
  int examples_of(int n) const;
  // The budget of the coming step in seconds (infinity: none: every
  // micro-batch is computed; "auto" before any step was observed).
  double budget_s() const { return m_budget_s; }
  // Whether a rank that has computed `done` (>= 1) micro-batches, `elapsed_s`
  // into the step, the last of which took `last_s` seconds, computes the
  // next one.
  bool next(int done, double elapsed_s, double last_s) const;
  // After a step, the seconds per example of every rank (its compute and
  // straggler time over the examples it computed), in rank order; "auto"
  // then chooses the next step's budget. Every rank calls it with the same
  // numbers (the step's exchange), so every rank holds the same budget.
  void observe(const std::vector<double>& per_example_s);

 private:
  void choose();
  int m_batch = 1, m_micro = 0, m_count = 1;
  bool m_auto = false;
  double m_keep = 1.0;
  double m_budget_s = std::numeric_limits<double>::infinity();
  std::deque<std::vector<double>> m_recent;  // per step: every rank's seconds per example
};

}  // namespace syncopt::worker
