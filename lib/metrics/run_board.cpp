// Step records and evaluations as TensorBoard events (see run_board.hpp).
#include "metrics/run_board.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <sstream>

#include "metrics/blame.hpp"

namespace syncopt::metrics {

namespace {

// Weight of the newest update in the smoothed step time: about the last
// 1/kRateWeight updates count, enough to steady a curve of per-step
// jitter without hiding a slowdown for long.
constexpr double kRateWeight = 0.1;

}  // namespace

RunBoard::RunBoard(const std::filesystem::path& dir, const std::string& tag, const RunClock& clock)
    : m_writer(dir, tag), m_clock(clock) {}

void RunBoard::step(const StepRecord& r) {
  const auto step = static_cast<std::int64_t>(r.step);
  const double wall = m_clock.unix_s(r.t_apply);
  m_writer.scalar("train/loss", step, r.loss, wall);
  m_writer.scalar("train/lr", step, r.lr, wall);

  // Seconds per update since the previous record; the first record of this
  // board (a new or resumed run) has only its own step's length.
  const double dt = m_last_step > 0 && r.step > m_last_step
                        ? (r.t_apply - m_last_apply) / static_cast<double>(r.step - m_last_step)
                        : r.t_apply - r.t_start;
  if (dt > 0.0) m_step_s = m_step_s > 0.0 ? (1.0 - kRateWeight) * m_step_s + kRateWeight * dt : dt;
  m_last_step = r.step;
  m_last_apply = r.t_apply;
  if (m_step_s > 0.0) m_writer.scalar("train/steps_per_s", step, 1.0 / m_step_s, wall);

  int drops = 0, accepted = 0;
  double staleness_sum = 0.0, last_accepted = 0.0;
  m_arrivals.clear();
  for (const GradRecord& g : r.grads) {
    m_arrivals.push_back(g.arrival_s);
    if (!g.accepted) {
      ++drops;
      continue;
    }
    staleness_sum += static_cast<double>(g.staleness);
    last_accepted = accepted++ == 0 ? g.arrival_s : std::max(last_accepted, g.arrival_s);
  }
  m_writer.scalar("sync/gradients_used", step, r.used, wall);
  m_writer.scalar("sync/drops", step, drops, wall);
  if (accepted > 0) {
    m_writer.scalar("sync/staleness_mean", step, staleness_sum / accepted, wall);
    m_writer.scalar("sync/time_to_kth", step, last_accepted, wall);
  }
  m_writer.histogram("sync/arrival_s", step, m_arrivals, wall);
  // Per-bucket staleness (async with the pipelined exchange).
  std::size_t buckets = 0;
  for (const GradRecord& g : r.grads) {
    if (g.accepted) buckets = std::max(buckets, g.layer_staleness.size());
  }
  for (std::size_t b = 0; b < buckets; ++b) {
    double sum = 0.0;
    int n = 0;
    for (const GradRecord& g : r.grads) {
      if (!g.accepted || b >= g.layer_staleness.size()) continue;
      sum += static_cast<double>(g.layer_staleness[b]);
      ++n;
    }
    if (n == 0) continue;
    if (b >= m_layer_tags.size()) {
      // Records of more buckets than named (or none named): numbers only.
      m_layer_tags.push_back("sync/staleness_by_layer/" + std::string(b < 10 ? "0" : "") +
                             std::to_string(b));
    }
    m_writer.scalar(m_layer_tags[b], step, sum / n, wall);
  }
  scores(r, step, wall);
}

// The ranks' scores of this step (metrics/blame.hpp): the highest relative
// score, and each worker's relative and individual score (the latter
// against its least own work so far) when there are at most
// kScoredWorkers.
void RunBoard::scores(const StepRecord& r, std::int64_t step, double wall) {
  const std::vector<StepScore> s = score_step(r);
  if (s.empty()) return;
  double highest = 1.0;
  for (const StepScore& x : s) highest = std::max(highest, x.relative);
  m_writer.scalar("ranks/relative_score_max", step, highest, wall);
  if (s.size() > kScoredWorkers) return;
  for (const StepScore& x : s) {
    auto [it, fresh] = m_least_work.try_emplace(x.worker, x.work_s);
    if (!fresh) it->second = std::min(it->second, x.work_s);
    const std::string w = std::to_string(x.worker);
    m_writer.scalar("ranks/relative_score/worker_" + w, step, x.relative, wall);
    if (it->second > 0.0) {
      m_writer.scalar("ranks/individual_score/worker_" + w, step, x.work_s / it->second, wall);
    }
  }
}

void RunBoard::set_bucket_layers(std::vector<std::string> layers) {
  m_layer_tags.clear();
  for (std::size_t b = 0; b < layers.size(); ++b) {
    m_layer_tags.push_back("sync/staleness_by_layer/" + std::string(b < 10 ? "0" : "") +
                           std::to_string(b) + "-" + layers[b]);
  }
}

void RunBoard::eval(const EvalScalars& e) {
  const auto step = static_cast<std::int64_t>(e.step);
  const double wall = m_clock.unix_s(e.wall_s);
  m_writer.scalar("eval/test_acc", step, e.test_acc, wall);
  m_writer.scalar("eval/test_acc_ema", step, e.test_acc_ema, wall);
  m_writer.scalar("eval/test_loss", step, e.test_loss, wall);
  m_writer.scalar("eval/test_loss_ema", step, e.test_loss_ema, wall);
}

namespace {

// "    " before every line: a Markdown code block, so that the Text tab
// shows the TOML as written.
std::string code_block(const std::string& text) {
  std::istringstream in(text);
  std::string out;
  for (std::string line; std::getline(in, line);) out += "    " + line + "\n";
  return out;
}

}  // namespace

void RunBoard::describe_run(const config::Config& cfg, const std::string& command) {
  const std::string toml_text = config::to_toml(cfg);
  const double wall = m_clock.unix_s(0.0);
  m_writer.text("run/config", 0, code_block(toml_text), wall);
  m_writer.text("run/command", 0, command, wall);
  // Typed values from the config's own TOML: numbers, strings, booleans;
  // a list (stragglers.workers) as its TOML text.
  std::map<std::string, TensorBoardWriter::HParam> hp;
  const toml::table doc = toml::parse(toml_text);
  for (const auto& [section, table] : doc) {
    if (!table.is_table()) continue;
    for (const auto& [key, node] : *table.as_table()) {
      const std::string name = std::string(section.str()) + "." + std::string(key.str());
      if (const auto b = node.value_exact<bool>()) {
        hp[name] = *b;
      } else if (node.is_number()) {
        hp[name] = *node.value<double>();
      } else if (const auto s = node.value_exact<std::string>()) {
        hp[name] = *s;
      } else if (const auto* list = node.as_array()) {
        std::ostringstream os;
        os << *list;
        hp[name] = os.str();
      }
    }
  }
  m_writer.hparams(hp, cfg.run.name, wall, wall);
}

std::shared_ptr<RunBoard> open_run_board(const config::RunConfig& run,
                                         const std::filesystem::path& run_dir,
                                         const std::string& tag, const RunClock& clock) {
  if (!run.tensorboard) return nullptr;
  return std::make_shared<RunBoard>(run_dir / "tb", tag, clock);
}

}  // namespace syncopt::metrics
