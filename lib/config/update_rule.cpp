// N, b and the lr multiplier of an update (see update_rule.hpp).
#include "config/update_rule.hpp"

#include <algorithm>

#include "common/error.hpp"

namespace syncopt::config {

double UpdateRule::lr_multiplier(int n_update) const {
  if (!scale_lr_by_n) return 1.0;
  return static_cast<double>(adaptive ? n_update : n);
}

std::vector<std::string> update_rule_problems(const Config& cfg, Mode mode, int workers,
                                              const std::string& workers_text) {
  std::vector<std::string> out;
  const auto& t = traits(mode);
  if (workers < 1) {
    out.push_back(workers_text + ": need at least one worker");
    return out;
  }
  if (t.has_backups && !is_auto(cfg.train.backups)) {
    const auto b = std::get<std::int64_t>(cfg.train.backups);
    if (b >= workers) {
      out.push_back("train.backups = " + std::to_string(b) +
                    " leaves N = " + std::to_string(workers - b) + " with " + workers_text +
                    ": need backups < workers; lower train.backups or add workers");
    }
  }
  return out;
}

UpdateRule update_rule(const Config& cfg, Mode mode, int workers, const std::string& workers_text) {
  const auto problems = update_rule_problems(cfg, mode, workers, workers_text);
  if (!problems.empty()) {
    std::string msg = problems.front();
    for (std::size_t i = 1; i < problems.size(); ++i) msg += "\n  " + problems[i];
    throw ConfigError(msg);
  }
  UpdateRule r;
  r.mode = mode;
  r.workers = workers;
  r.scale_lr_by_n = cfg.optim.scale_lr_by_n;
  const auto& t = traits(mode);
  r.adaptive = t.has_backups && is_auto(cfg.train.backups);
  // Adaptive b starts with one backup (none with a single worker).
  r.backups = !t.has_backups ? 0
              : r.adaptive   ? std::min(1, workers - 1)
                             : static_cast<int>(std::get<std::int64_t>(cfg.train.backups));
  switch (t.n_rule) {
    case NRule::kOne:
      r.n = 1;
      break;
    case NRule::kWorkersMinusBackups:
      r.n = workers - r.backups;
      break;
    case NRule::kSoftsyncC:
      r.n = static_cast<int>(cfg.train.softsync_c);
      break;
    case NRule::kAllRanks:
      r.n = workers;
      break;
  }
  return r;
}

}  // namespace syncopt::config
