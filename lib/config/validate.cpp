// Validation (see validate.hpp).
#include "config/validate.hpp"

#include <algorithm>
#include <cmath>
#include <functional>

#include "config/text.hpp"
#include "config/values.hpp"

namespace syncopt::config::detail {

namespace {

bool in_range(double v, const Range& r) {
  // Written as positive conditions so that NaN fails them.
  const bool lo_ok = r.lo_open ? v > r.lo : v >= r.lo;
  const bool hi_ok = r.hi_open ? v < r.hi : v <= r.hi;
  return lo_ok && hi_ok;
}

// An integer key against its range as the 64-bit value it is: a long double
// holds every int64 exactly, where a double would round 2^53 + 1.
bool in_range(std::int64_t v, const Range& r) {
  const auto x = static_cast<long double>(v);
  const auto lo = static_cast<long double>(r.lo), hi = static_cast<long double>(r.hi);
  return (r.lo_open ? x > lo : x >= lo) && (r.hi_open ? x < hi : x <= hi);
}

}  // namespace

bool has_range(const Range& r) { return r.lo != -kInf || r.hi != kInf; }

// ">= 1", "> 0", "in [0, 1)", ">= 1 and <= 2147483647".
std::string range_text(const Range& r) {
  if (r.hi == kInf) return (r.lo_open ? "> " : ">= ") + format_number(r.lo);
  // A key read into an int: its lower bound is what matters to a user.
  if (r.hi == kIntMax && !r.hi_open) {
    return (r.lo_open ? "> " : ">= ") + format_number(r.lo) + " and <= 2147483647";
  }
  if (r.lo == -kInf) return (r.hi_open ? "< " : "<= ") + format_number(r.hi);
  return std::string("in ") + (r.lo_open ? "(" : "[") + format_number(r.lo) + ", " +
         format_number(r.hi) + (r.hi_open ? ")" : "]");
}

namespace {

// Each key against its own type, range and choices.
void check_each_key(const Config& cfg,
                    const std::function<void(const KeySpec&, const std::string&)>& add) {
  for (const auto& spec : key_specs()) {
    switch (spec.type) {
      case KeyType::kFloat: {
        const double v = field_of<double>(spec, cfg);
        if (!std::isfinite(v)) {
          add(spec, "must be a finite number" +
                        (has_range(spec.range) ? " " + range_text(spec.range) : ""));
        } else if (!in_range(v, spec.range)) {
          add(spec, "must be " + range_text(spec.range));
        }
        break;
      }
      case KeyType::kInt:
        if (!in_range(field_of<std::int64_t>(spec, cfg), spec.range)) {
          add(spec, "must be " + range_text(spec.range));
        }
        break;
      case KeyType::kCountOrAuto:
        if (const auto& v = field_of<CountOrAuto>(spec, cfg);
            !is_auto(v) && !in_range(std::get<std::int64_t>(v), spec.range)) {
          add(spec, "must be \"auto\" or " + range_text(spec.range));
        }
        break;
      case KeyType::kFloatOrAuto:
        if (const auto& v = field_of<FloatOrAuto>(spec, cfg);
            !is_auto(v) &&
            (!std::isfinite(std::get<double>(v)) || !in_range(std::get<double>(v), spec.range))) {
          add(spec, "must be \"auto\" or " + range_text(spec.range));
        }
        break;
      case KeyType::kUint:
        // TOML integers are signed 64-bit: a larger seed could not be written back.
        if (field_of<std::uint64_t>(spec, cfg) > kMaxTomlInt)
          add(spec, "must be <= " + std::to_string(kMaxTomlInt));
        break;
      case KeyType::kIntList: {
        const auto& values = field_of<std::vector<std::int64_t>>(spec, cfg);
        for (std::size_t i = 0; i < values.size(); ++i) {
          if (!in_range(values[i], spec.range)) {
            add(spec, "element " + std::to_string(i) + " must be " + range_text(spec.range));
          }
          if (std::find(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(i),
                        values[i]) != values.begin() + static_cast<std::ptrdiff_t>(i)) {
            add(spec,
                "element " + std::to_string(i) + " repeats worker " + std::to_string(values[i]));
          }
        }
        break;
      }
      case KeyType::kString:
        // Names and paths go into file names and JSON records: text only.
        if (!valid_utf8(field_of<std::string>(spec, cfg))) {
          add(spec, "is not valid UTF-8 text; write it in UTF-8");
        }
        break;
      case KeyType::kBool:
      case KeyType::kEnum:    // only valid names can be stored
      case KeyType::kLayers:  // checked as read; shapes when the model is built
        break;
    }
  }
}

// Micro-batches and the compute budget (allreduce, docs/design.md §3).
void check_micro_batches(const Config& cfg,
                         const std::function<void(const KeySpec&, const std::string&)>& add) {
  const TrainConfig& t = cfg.train;
  const bool budget = is_auto(t.compute_budget_ms) || std::get<double>(t.compute_budget_ms) > 0.0;
  if (t.micro_batch > 0 && t.mode != Mode::kAllreduce) {
    add(spec_of("train", "micro_batch"),
        "applies to train.mode = \"allreduce\" only (set it to 0 for " +
            std::string(mode_name(t.mode)) + ")");
  } else if (t.micro_batch > t.batch) {
    add(spec_of("train", "micro_batch"), "exceeds train.batch = " + std::to_string(t.batch) +
                                             "; a micro-batch is part of a rank's batch");
  }
  if (budget && t.mode != Mode::kAllreduce) {
    add(spec_of("train", "compute_budget_ms"),
        "applies to train.mode = \"allreduce\" only (the parameter-server modes cut "
        "stragglers with train.backups)");
  } else if (budget && (t.micro_batch == 0 || t.micro_batch == t.batch)) {
    add(spec_of("train", "compute_budget_ms"),
        "needs micro-batches smaller than the batch to cut: set train.micro_batch to 1 .. " +
            std::to_string(std::max<std::int64_t>(1, t.batch - 1)) +
            " (e.g. train.batch / 4; every rank computes at least one)");
  }
}

// Rules beyond one key's range.
void check_across_keys(const Config& cfg,
                       const std::function<void(const KeySpec&, const std::string&)>& add) {
  const std::string& name = cfg.run.name;
  const bool has_control = std::any_of(name.begin(), name.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
  });
  if (name.empty() || name == "." || name.find('/') != std::string::npos ||
      name.find('\\') != std::string::npos || name.find("..") != std::string::npos || has_control) {
    add(spec_of("run", "name"),
        "must be a plain, non-empty directory name (no '/', '\\', '..' or control characters), "
        "e.g. fmnist-sync");
  }
  if (cfg.run.dir.empty())
    add(spec_of("run", "dir"), "must not be empty (use \".\" for the current directory)");
  if (cfg.data.path.empty() && cfg.data.name != DataSet::kSynthetic) {
    add(spec_of("data", "path"),
        "must name the data set directory when data.name = \"" + to_string(cfg.data.name) + "\"");
  }
  if (cfg.train.steps == 0 && !(cfg.train.epochs > 0)) {
    add(spec_of("train", "epochs"), "must be > 0 when train.steps = 0 (set one of the two)");
  }
  if (is_auto(cfg.train.backups) && !cfg.optim.scale_lr_by_n) {
    add(spec_of("train", "backups"),
        "needs optim.scale_lr_by_n = true: the lr follows the N "
        "that is chosen");
  }
  if (cfg.train.clock == Clock::kVirtual && !traits(cfg.train.mode).versioned &&
      cfg.train.mode != Mode::kAllreduce) {
    add(spec_of("train", "clock"),
        "applies to train.mode = sync, timeout or allreduce (use syncopt simulate "
        "for the other modes in modelled time)");
  }
  check_micro_batches(cfg, add);
  if (const double s = cfg.train.simulated_staleness; s > 0) {
    const auto& spec = spec_of("train", "simulated_staleness");
    const StalenessDist dist = cfg.train.staleness_dist;
    if (cfg.train.mode != Mode::kLocal) {
      add(spec,
          "is simulated in train.mode = \"local\" only (the other modes have real "
          "staleness: measure it with async)");
    } else if (dist == StalenessDist::kFixed && std::floor(s) != s) {
      add(spec, "must be a whole number with train.staleness_dist = \"fixed\"");
    } else if (dist == StalenessDist::kUniform && std::floor(2 * s) != 2 * s) {
      add(spec,
          "must be a multiple of 0.5 with train.staleness_dist = \"uniform\" (drawn "
          "from 0 .. 2s)");
    } else if (cfg.train.staleness_max > 0 && !(static_cast<double>(cfg.train.staleness_max) > s) &&
               (dist == StalenessDist::kGeometric || dist == StalenessDist::kExponential)) {
      add(spec_of("train", "staleness_max"), "must be above train.simulated_staleness");
    }
  }
  if (cfg.optim.lr > 0.0 && !(cfg.optim.final_lr < cfg.optim.lr)) {
    add(spec_of("optim", "final_lr"), "must be below optim.lr (the schedule decreases to it)");
  }
  if (cfg.model.name == ModelName::kCustom && cfg.model.layers.empty()) {
    add(spec_of("model", "name"),
        "needs the layers: add [[model.layers]] tables (docs/models.md), or pick a built-in "
        "model");
  }
  if (cfg.model.name != ModelName::kCustom && !cfg.model.layers.empty()) {
    add(spec_of("model", "name"),
        "is a built-in model, but model.layers describes one: set model.name = \"custom\" to "
        "train the layers, or remove them");
  }
  if (cfg.exchange.wire != Precision::kFp32 && cfg.train.mode == Mode::kAllreduce) {
    add(spec_of("exchange", "wire"),
        "applies to the parameter-server modes; allreduce sums the gradients in FP32 (set "
        "exchange.wire = \"fp32\", or use a parameter-server mode such as sync)");
  }
  if (cfg.stragglers.model == StragglerModel::kTrace && cfg.stragglers.trace.empty()) {
    add(spec_of("stragglers", "model"), "needs stragglers.trace, the path of the trace to replay");
  }
}

}  // namespace

std::vector<Problem> check(const Config& cfg) {
  std::vector<Problem> out;
  const auto add = [&](const KeySpec& spec, const std::string& what) {
    out.push_back({spec.path(), spec.path() + " = " + format_value(spec, cfg) + ": " + what});
  };
  check_each_key(cfg, add);
  check_across_keys(cfg, add);
  return out;
}

}  // namespace syncopt::config::detail
