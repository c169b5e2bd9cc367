// Role layout, parameter slicing and the run plan (see roles.hpp).
#include "layout/roles.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "common/error.hpp"

namespace syncopt::layout {

using config::Mode;
using config::traits;

Role Roles::role_of(int rank) const {
  if (rank < shards) return Role::kShard;
  if (rank == evaluator_rank) return Role::kEvaluator;
  return Role::kWorker;
}

std::string Roles::role_name(int rank) const {
  switch (role_of(rank)) {
    case Role::kShard:
      return std::string("ps").append(std::to_string(rank));
    case Role::kEvaluator:
      return "eval";
    case Role::kWorker:
      return std::string("w").append(std::to_string(worker_of(rank)));
  }
  return "?";
}

namespace {

// K, and where it comes from, for messages.
std::string workers_text(long workers, int world, long ps, long eval) {
  return std::to_string(workers) + " workers (world " + std::to_string(world) + " - cluster.ps " +
         std::to_string(ps) + (eval ? " - 1 evaluator" : "") + ")";
}

}  // namespace

std::vector<std::string> check_layout(const config::Config& cfg, int world) {
  std::vector<std::string> errs;
  const auto& t = traits(cfg.train.mode);
  if (world > 1 && cfg.train.mode == Mode::kLocal) {
    errs.push_back("train.mode = \"local\" runs on one rank, but this job has " +
                   std::to_string(world) +
                   " ranks: set train.mode to sync, async, softsync, ssp, timeout or allreduce, "
                   "or run without mpirun");
    return errs;
  }
  if (world == 1 || !t.uses_ps) return errs;  // local, or every rank a worker
  const long ps = cfg.cluster.ps;
  const long eval = cfg.cluster.evaluator ? 1 : 0;
  const long workers = world - ps - eval;
  const std::string need = "cluster.ps = " + std::to_string(ps) + (eval ? " + 1 evaluator" : "");
  if (workers < 1) {
    // The smallest world that fits: one worker, or b + 1 with a fixed b.
    long min_workers = 1;
    if (t.has_backups && !config::is_auto(cfg.train.backups)) {
      min_workers = std::max<long>(1, std::get<std::int64_t>(cfg.train.backups) + 1);
    }
    errs.push_back("world of " + std::to_string(world) + " ranks does not fit " + need +
                   " and at least " + std::to_string(min_workers) +
                   (min_workers == 1 ? " worker" : " workers") + ": run with mpirun -np " +
                   std::to_string(ps + eval + min_workers) + " or more");
    return errs;
  }
  for (auto& e : config::update_rule_problems(cfg, cfg.train.mode, static_cast<int>(workers),
                                              workers_text(workers, world, ps, eval))) {
    errs.push_back(std::move(e));
  }
  return errs;
}

Roles make_roles(const config::Config& cfg, int world) {
  const auto errs = check_layout(cfg, world);
  if (!errs.empty()) {
    std::string msg = "the rank layout does not fit:";
    for (const auto& e : errs) msg += "\n  " + e;
    throw ConfigError(msg);
  }
  Roles r;
  r.world = world;
  r.mode = world == 1 ? Mode::kLocal : cfg.train.mode;
  const auto& t = traits(r.mode);
  if (t.uses_ps) {
    r.shards = static_cast<int>(cfg.cluster.ps);
    r.evaluator_rank = cfg.cluster.evaluator ? r.shards : -1;
    r.first_worker = r.shards + (cfg.cluster.evaluator ? 1 : 0);
  }
  r.workers = world - r.first_worker;
  r.rule = config::update_rule(cfg, r.mode, r.workers, std::to_string(r.workers) + " workers");
  return r;
}

std::vector<Slice> shard_slices(std::size_t count, int shards) {
  std::vector<Slice> out(static_cast<std::size_t>(shards));
  const std::size_t base = count / static_cast<std::size_t>(shards);
  const std::size_t extra = count % static_cast<std::size_t>(shards);
  std::size_t offset = 0;
  for (std::size_t s = 0; s < out.size(); ++s) {
    out[s].offset = offset;
    out[s].count = base + (s < extra ? 1 : 0);
    offset += out[s].count;
  }
  return out;
}

std::string describe(const Roles& roles, const std::vector<Slice>& slices) {
  std::ostringstream os;
  os << "# layout: mode " << config::mode_name(roles.mode) << ", world " << roles.world << " ranks";
  if (roles.shards > 0) {
    os << ", " << roles.shards << " parameter-server shard(s), "
       << (roles.evaluator_rank >= 0 ? "1 evaluator, " : "no evaluator, ") << roles.workers
       << " workers";
  }
  if (traits(roles.mode).has_backups) {
    os << " (N = " << roles.rule.n << ", b = " << roles.rule.backups
       << (roles.rule.adaptive ? ", adapted online: train.backups = auto" : "") << ")";
  }
  os << "\n";
  for (int r = 0; r < roles.world; ++r) {
    os << "rank " << r << ": ";
    if (roles.mode == Mode::kLocal) {
      os << "local trainer\n";
      continue;
    }
    switch (roles.role_of(r)) {
      case Role::kShard: {
        if (static_cast<std::size_t>(r) >= slices.size()) {
          throw InternalError("layout::describe without the slice of shard " + std::to_string(r));
        }
        const auto& s = slices[static_cast<std::size_t>(r)];
        os << "parameter-server shard " << r << ", parameters [" << s.offset << ", "
           << s.offset + s.count << ") = " << s.count << " floats";
        if (r == 0) os << "; writes steps.jsonl and summary.json";
        if (r == 0 && roles.evaluator_rank < 0) os << "; evaluates at the end";
        break;
      }
      case Role::kEvaluator:
        os << "evaluator (pulls theta and EMA, writes eval.jsonl)";
        break;
      case Role::kWorker:
        os << "worker " << roles.worker_of(r) << " (data shard " << roles.worker_of(r) << " of "
           << roles.workers << ")";
        if (roles.shards == 0 && r == 0) os << "; writes the records";
        break;
    }
    os << "\n";
  }
  return os.str();
}

Plan make_plan(const config::Config& cfg, const Roles& roles, std::int64_t train_count) {
  Plan p;
  p.train_count = static_cast<double>(train_count);
  p.examples_per_update = config::examples_per_update(roles.rule.n, cfg.train.batch);
  if (cfg.train.steps > 0) {
    p.total_steps = static_cast<std::uint64_t>(cfg.train.steps);
  } else {
    p.total_steps = static_cast<std::uint64_t>(
        std::ceil(cfg.train.epochs * p.train_count / p.examples_per_update));
    // Shards count accepted examples (a timeout update may carry fewer
    // than N), and so does allreduce with a compute budget (an update may
    // carry fewer than K batches); otherwise local and allreduce take whole
    // updates.
    const auto& budget = cfg.train.compute_budget_ms;
    const bool budgeted = roles.mode == config::Mode::kAllreduce && cfg.train.micro_batch > 0 &&
                          (config::is_auto(budget) || std::get<double>(budget) > 0.0);
    if (traits(roles.mode).uses_ps || budgeted) {
      p.target_examples = static_cast<std::uint64_t>(std::ceil(cfg.train.epochs * p.train_count));
    }
  }
  p.total_epochs = p.target_examples > 0
                       ? static_cast<double>(p.target_examples) / p.train_count
                       : static_cast<double>(p.total_steps) * p.examples_per_update / p.train_count;
  return p;
}

}  // namespace syncopt::layout
