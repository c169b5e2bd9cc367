// What one update is, derived in one place for the trainer, the simulator
// and the planner: N (gradients averaged per update), b (backups), whether
// N is chosen online (train.backups = "auto"), and the learning-rate
// multiplier that follows from N (optim.scale_lr_by_n).
#pragma once

#include <string>
#include <vector>

#include "config/config.hpp"

namespace syncopt::config {

struct UpdateRule {
  Mode mode = Mode::kLocal;
  int workers = 1;        // K (in allreduce: every rank)
  int n = 1;              // gradients per update (adaptive: the N it starts with)
  int backups = 0;        // b = K - N in sync and timeout (adaptive: the b it starts with)
  bool adaptive = false;  // train.backups = "auto": the shards choose N online
  bool scale_lr_by_n = false;

  // The lr multiplier of an update that averages `n_update` gradients: N
  // when optim.scale_lr_by_n (the N chosen for that update when adaptive;
  // the configured N otherwise, also for a timeout update that fired with
  // fewer), else 1.
  double lr_multiplier(int n_update) const;
};

// Every problem of K = `workers` for the config's mode and train.backups
// (empty = fits); `workers_text` says where K comes from in messages,
// e.g. "5 workers (world 7 - cluster.ps = 1 - 1 evaluator)".
std::vector<std::string> update_rule_problems(const Config& cfg, Mode mode, int workers,
                                              const std::string& workers_text);
// The rule; ConfigError listing update_rule_problems() if K does not fit.
UpdateRule update_rule(const Config& cfg, Mode mode, int workers, const std::string& workers_text);

}  // namespace syncopt::config
