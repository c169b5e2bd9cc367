// Config loading. One table of every key (section, name, type, range, allowed
// strings, meaning) drives the TOML reader, the `--set` overrides, validate(),
// to_toml() and key_reference(), so the five cannot drift apart. Every problem
// is collected and reported in one ConfigError.
#include "config/config.hpp"

#include <toml++/toml.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <sstream>
#include <string_view>
#include <type_traits>
#include <utility>

#include "common/error.hpp"
#include "config/model_layers.hpp"

namespace syncopt::config {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr std::int64_t kAutoInt = config::kAuto;
constexpr std::uint64_t kMaxTomlInt =
    static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
// Duplicate keys are recovered from by blanking the offending line and parsing
// again; this bounds the retries on a pathological file.
constexpr int kMaxRecoveries = 64;
constexpr std::string_view kDuplicateTable = "syncopt_repeated_table_at_line_";

enum class KeyType { kString, kInt, kUint, kFloat, kBool, kIntList, kMode, kLayers };

// The KeyType of a config field's C++ type; a field of any other type does not compile.
template <class T>
constexpr KeyType key_type_of() {
  if constexpr (std::is_same_v<T, std::string>) {
    return KeyType::kString;
  } else if constexpr (std::is_same_v<T, std::int64_t>) {
    return KeyType::kInt;
  } else if constexpr (std::is_same_v<T, std::uint64_t>) {
    return KeyType::kUint;
  } else if constexpr (std::is_same_v<T, double>) {
    return KeyType::kFloat;
  } else if constexpr (std::is_same_v<T, bool>) {
    return KeyType::kBool;
  } else if constexpr (std::is_same_v<T, Mode>) {
    return KeyType::kMode;
  } else if constexpr (std::is_same_v<T, std::vector<nn::LayerDesc>>) {
    return KeyType::kLayers;  // read and written by config/model_layers.cpp
  } else {
    static_assert(std::is_same_v<T, std::vector<std::int64_t>>,
                  "config field of an unsupported type");
    return KeyType::kIntList;
  }
}

// Numeric bounds of a key (of each element for a list). Checked by validate()
// and printed by key_reference().
struct Range {
  double lo = -kInf;
  bool lo_open = false;
  double hi = kInf;
  bool hi_open = false;
};

Range no_range() { return {}; }
Range at_least(double lo) { return {lo, false, kInf, false}; }
Range above(double lo) { return {lo, true, kInf, false}; }
Range within(double lo, bool lo_open, double hi, bool hi_open) {
  return {lo, lo_open, hi, hi_open};
}

struct KeySpec {
  std::string_view section;
  std::string_view key;
  KeyType type;
  void* (*field)(Config&);
  Range range;
  std::string_view rule;  // a further rule, for the reference ("" = none)
  std::string_view meaning;
  std::vector<std::string_view> choices;  // enum keys: the allowed strings

  std::string path() const { return std::string(section) + "." + std::string(key); }
};

template <class T>
T& field_of(const KeySpec& spec, Config& cfg) {
  return *static_cast<T*>(spec.field(cfg));
}
template <class T>
const T& field_of(const KeySpec& spec, const Config& cfg) {
  // Read-only use of the one accessor; the object is never written through it.
  return *static_cast<const T*>(spec.field(const_cast<Config&>(cfg)));
}

// The type of the field is deduced, so a spec can never disagree with its struct.
// clang-format off
#define SYNCOPT_KEY(sec, name, range, rule, meaning, ...)                       \
  KeySpec {                                                                     \
    #sec, #name,                                                                \
    key_type_of<std::remove_cvref_t<decltype(std::declval<Config&>().sec.name)>>(), \
    [](Config& c) -> void* { return &c.sec.name; }, range, rule, meaning,      \
    { __VA_ARGS__ }                                                             \
  }
// clang-format on

std::vector<KeySpec> make_key_specs();

const std::vector<KeySpec>& key_specs() {
  static const std::vector<KeySpec> kSpecs = [] {
    auto specs = make_key_specs();
    // An enum key's allowed names come from its own table, never a copy.
    for (auto& spec : specs) {
      if (spec.type == KeyType::kMode) spec.choices = mode_names();
    }
    return specs;
  }();
  return kSpecs;
}

std::vector<KeySpec> make_key_specs() {
  return {
      // [run]
      SYNCOPT_KEY(run, name, no_range(), "a plain name: no '/', '\\' or '..'",
                  "Run name; outputs go to <run.dir>/<run.name>/."),
      SYNCOPT_KEY(run, dir, no_range(), "non-empty path",
                  "Parent directory of the run directories."),
      SYNCOPT_KEY(run, seed, no_range(), "0 .. 2^63-1",
                  "Master seed: initialization, data order, augmentation."),
      SYNCOPT_KEY(run, resume, no_range(), "",
                  "Continue <run.dir>/<run.name>/ from its latest verified checkpoint (exit 66 if "
                  "there is none, 65 if it is corrupt; never a silent fresh start)."),
      SYNCOPT_KEY(run, overwrite, no_range(), "",
                  "Replace an existing run directory (never done by default)."),
      SYNCOPT_KEY(run, checkpoint_every_s, at_least(0), "",
                  "Save a checkpoint every S seconds of training; 0 = off. One is also saved at "
                  "the end and on a stop signal (SIGTERM, SIGUSR1, SIGINT)."),
      SYNCOPT_KEY(run, checkpoint_every_steps, at_least(0), "",
                  "Save a checkpoint every N updates; 0 = off."),
      SYNCOPT_KEY(run, keep_checkpoints, at_least(1), "",
                  "Checkpoints kept in <run>/checkpoints/ (the newest; older ones are removed)."),
      SYNCOPT_KEY(run, progress, no_range(), "",
                  "Rank 0's progress: live (one line refreshed in place: steps, epoch, loss, "
                  "examples/s, ETA), lines (a log line every run.progress_every_steps), or auto: "
                  "live when stderr, or under mpirun mpirun's stderr, is a terminal.",
                  "auto", "live", "lines"),
      SYNCOPT_KEY(run, progress_every_steps, at_least(1), "",
                  "Progress line period, in steps, when the progress line is not live."),
      SYNCOPT_KEY(run, tensorboard, no_range(), "",
                  "Write TensorBoard event files to <run.dir>/<run.name>/tb/ (loss, lr, steps/s, "
                  "drops, staleness, arrival-time histograms, test accuracy with and without "
                  "EMA), so tensorboard --logdir <run.dir> shows runs side by side."),
      // [data]
      SYNCOPT_KEY(
          data, name, no_range(), "",
          "Data set: fashion-mnist (Debian package), idx (MNIST-format IDX files in data.path), "
          "cifar10 (binary batches in data.path), synthetic (seeded, for tests).",
          "fashion-mnist", "idx", "cifar10", "synthetic"),
      SYNCOPT_KEY(data, path, no_range(), "non-empty unless data.name = synthetic",
                  "Directory holding the data set files."),
      SYNCOPT_KEY(data, augment, no_range(), "",
                  "Random small rotations and zooms of the training images."),
      SYNCOPT_KEY(data, augment_max_rotate_deg, within(0, false, 180, false), "",
                  "Augmentation: rotation uniform in [-max, max] degrees."),
      SYNCOPT_KEY(data, augment_max_zoom, within(0, false, 1, true), "",
                  "Augmentation: scale uniform in [1-z, 1+z]."),
      SYNCOPT_KEY(data, limit_train, at_least(0), "",
                  "Use only the first N training examples; 0 = all."),
      SYNCOPT_KEY(data, limit_test, at_least(0), "",
                  "Use only the first N test examples; 0 = all."),
      SYNCOPT_KEY(data, synthetic_train, at_least(1), "",
                  "synthetic: number of training examples."),
      SYNCOPT_KEY(data, synthetic_test, at_least(1), "", "synthetic: number of test examples."),
      // [model]
      SYNCOPT_KEY(model, name, no_range(), "",
                  "Model: cnn (the paper's App. A.1 CNN), mlp (one hidden layer), logreg (logistic "
                  "regression), resnet20 (He et al. 2016 section 4.2, 0.27 M parameters), "
                  "resnet18 (11 M, a 3x3 stem for small images), custom (model.layers). "
                  "`syncopt train CONFIG --dry-run` prints the model layer by layer.",
                  "cnn", "mlp", "logreg", "resnet20", "resnet18", "custom"),
      SYNCOPT_KEY(model, weight_norm, no_range(), "",
                  "cnn, mlp, logreg: weight normalization in every layer (the resnets use batch "
                  "norm; custom layers set weight_norm per conv / fc)."),
      SYNCOPT_KEY(model, mlp_hidden, at_least(1), "", "mlp: hidden units."),
      SYNCOPT_KEY(model, layers, no_range(), "model.name = custom",
                  "custom: the layers in order, as [[model.layers]] tables (or an inline array "
                  "of tables); each reads the previous layer's output. Types and attributes "
                  "(docs/models.md): conv (out, kernel = 3, stride = 1, pad = 0, bias = true, "
                  "weight_norm = false); bn (eps = 1e-5); relu; add (from = an earlier layer's "
                  "name or \"input\", shortcut = identity | projection: a 1x1 conv and bn on "
                  "the shortcut when the shapes differ); maxpool and avgpool (kernel = 2, stride "
                  "= kernel, pad = 0); gap (global average pooling); fc (out = the class count, "
                  "bias, weight_norm); dropout (rate = 0.5); flatten. Every layer takes a name "
                  "(default: type and position, e.g. relu4)."),
      // [optim]
      SYNCOPT_KEY(optim, name, no_range(), "", "Optimizer, both with momentum.", "sgd", "rmsprop"),
      SYNCOPT_KEY(optim, lr, above(0), "",
                  "Learning rate, before the schedule and optim.scale_lr_by_n."),
      SYNCOPT_KEY(optim, momentum, within(0, false, 1, true), "", "Momentum coefficient."),
      SYNCOPT_KEY(optim, rms_decay, within(0, false, 1, true), "",
                  "rmsprop: decay of the running average of squared gradients."),
      SYNCOPT_KEY(optim, eps, above(0), "", "rmsprop: added to the denominator."),
      SYNCOPT_KEY(optim, schedule, no_range(), "",
                  "Learning-rate schedule; epochs count accepted examples.", "constant",
                  "exponential", "linear_anneal", "warmup_constant", "warmup_linear_anneal",
                  "warmup_exponential"),
      SYNCOPT_KEY(optim, decay_rate, within(0, true, 1, false), "",
                  "exponential: lr *= decay_rate every optim.decay_epochs."),
      SYNCOPT_KEY(optim, decay_epochs, above(0), "", "exponential: epochs between two decays."),
      SYNCOPT_KEY(
          optim, anneal_epochs, at_least(0), "",
          "linear_anneal: anneal linearly to 0 over the last E epochs; 0 = over the whole run."),
      SYNCOPT_KEY(optim, warmup_epochs, at_least(0), "",
                  "warmup_*: linear ramp from 0 over this many epochs."),
      SYNCOPT_KEY(optim, final_lr, at_least(0), "< optim.lr",
                  "exponential: the lr never decays below this; linear_anneal: the lr anneals "
                  "to this instead of 0 (e.g. 1e-4 decreasing to 3e-6, the paper's App. A.4). "
                  "Before optim.scale_lr_by_n, like optim.lr."),
      SYNCOPT_KEY(optim, scale_lr_by_n, no_range(), "",
                  "Multiply lr by N, the number of gradients aggregated per update."),
      SYNCOPT_KEY(optim, ema, within(0, false, 1, true), "",
                  "Decay of the exponential moving average of the parameters; 0 disables it."),
      SYNCOPT_KEY(optim, weight_decay, at_least(0), "", "L2 weight decay coefficient."),
      // [train]
      SYNCOPT_KEY(
          train, mode, no_range(), "",
          "Training mode: local (one process), sync (N of N+b gradients, backup workers), async, "
          "softsync, ssp (stale synchronous), timeout, allreduce."),
      SYNCOPT_KEY(train, batch, at_least(1), "", "Examples per worker per step."),
      SYNCOPT_KEY(train, steps, at_least(0), "",
                  "Number of updates; 0 = run train.epochs instead."),
      SYNCOPT_KEY(train, epochs, at_least(0), "> 0 when train.steps = 0",
                  "Epochs of accepted examples (used when train.steps = 0)."),
      SYNCOPT_KEY(train, backups, at_least(0), "",
                  "b, backup workers: an update uses N = workers - b gradients. \"auto\": the "
                  "shard picks N every 20 updates from the last 80 versions' arrival times: the "
                  "smallest N whose rate N / (time to the N-th gradient + update cost) is within "
                  "3 % of the highest (an update of N gradients is worth less than N of one), "
                  "with the lr following N (needs optim.scale_lr_by_n = true); the N of each "
                  "update is in its record.",
                  "auto"),
      SYNCOPT_KEY(train, softsync_c, at_least(1), "", "softsync: gradients aggregated per update."),
      SYNCOPT_KEY(train, ssp_bound, at_least(0), "",
                  "ssp: Ho et al.'s stale synchronous clock bound: a worker that has pushed more "
                  "than this many gradients beyond the slowest live worker waits. It bounds the "
                  "clock gap between workers, not the staleness of an applied gradient, which is "
                  "recorded and reported apart (it can exceed the bound with several workers)."),
      SYNCOPT_KEY(train, timeout_ms, above(0), "",
                  "timeout: an update falls due when N gradients of the version arrived, or this "
                  "many ms after the first of them (at least one): DESIGN.md's rule, not the "
                  "step's start."),
      SYNCOPT_KEY(train, clock, no_range(), "sync and timeout only for virtual",
                  "wall: real arrival times decide which N of N + b count. virtual: every "
                  "gradient gets a modelled finish time (a compute time drawn from sim.compute_ms, "
                  "sim.compute_cv, sim.compute_dist and sim.seed, plus its seeded straggler "
                  "delay, not slept); each step waits for every live worker and accepts the N "
                  "smallest, so runs are bitwise repeatable for any b and records use the "
                  "virtual time axis.",
                  "wall", "virtual"),
      SYNCOPT_KEY(train, agree_shards, no_range(), "",
                  "sync and timeout with several shards: shard 0 decides which N workers an "
                  "update averages and the other shards apply the same ones (else each shard "
                  "takes its own first N, counted as cross_shard_disagreements)."),
      SYNCOPT_KEY(train, simulated_staleness, at_least(0), "local mode only",
                  "Simulated staleness s (paper section 2.1), in updates; 0 = off. The gradient "
                  "of update t is computed on the parameters s_t updates old (s_t <= t) and "
                  "applied to the current ones, as an async parameter server would. Keeps the "
                  "last max(s_t) + 1 parameter vectors in memory and in checkpoints."),
      SYNCOPT_KEY(train, staleness_dist, no_range(), "",
                  "Distribution of s_t, mean train.simulated_staleness: fixed (s_t = s, s whole), "
                  "uniform (on 0 .. 2s, 2s whole), geometric (P(s_t >= k) = q^k, async's "
                  "staleness under exponential compute times; clamped at train.staleness_max, q "
                  "set so the mean stays s); exponential = geometric. Drawn from "
                  "stragglers.seed, or run.seed when that is 0.",
                  "fixed", "uniform", "geometric", "exponential"),
      SYNCOPT_KEY(train, staleness_max, at_least(0), "> train.simulated_staleness if set",
                  "geometric: largest s_t (draws above are clamped); 0 = ceil(4 s)."),
      // [cluster]
      SYNCOPT_KEY(cluster, ps, at_least(1), "", "Parameter-server shards (one rank each)."),
      SYNCOPT_KEY(cluster, evaluator, no_range(), "",
                  "One extra rank evaluates the test set during training."),
      SYNCOPT_KEY(cluster, dead_after_s, above(0), "",
                  "A rank silent this long (no heartbeat, which does not depend on step length) "
                  "is dead: a worker is excluded, and the run goes on while N live workers "
                  "remain; otherwise it stops (exit 69)."),
      // [stragglers]
      SYNCOPT_KEY(stragglers, model, no_range(), "",
                  "Injected straggler delay, drawn per worker and step.", "none", "bernoulli",
                  "exponential", "lognormal", "pareto", "fixed", "trace"),
      SYNCOPT_KEY(stragglers, workers, at_least(0), "worker ids, no repeats",
                  "Workers affected; [] = all."),
      SYNCOPT_KEY(stragglers, prob, within(0, false, 1, false), "",
                  "bernoulli: chance per step of a slowdown."),
      SYNCOPT_KEY(stragglers, factor, at_least(1), "",
                  "bernoulli, fixed: multiplier of the step's compute time."),
      SYNCOPT_KEY(
          stragglers, mean_ms, at_least(0), "",
          "exponential, lognormal, pareto: mean extra delay in ms; fixed: constant extra delay."),
      SYNCOPT_KEY(stragglers, sigma, above(0), "", "lognormal: sigma of the log of the delay."),
      SYNCOPT_KEY(stragglers, alpha, above(1), "",
                  "pareto: shape; > 1 so that the mean is finite."),
      SYNCOPT_KEY(stragglers, trace, no_range(), "required when stragglers.model = trace",
                  "trace: a steps.jsonl (or CSV) whose arrival times are replayed."),
      SYNCOPT_KEY(stragglers, seed, no_range(), "0 .. 2^63-1", "Seed of the straggler draws."),
      // [eval]
      SYNCOPT_KEY(eval, every_steps, at_least(0), "", "Evaluate every N updates; 0 = off."),
      SYNCOPT_KEY(eval, every_s, at_least(0), "",
                  "Evaluate every S seconds of wall time; 0 = off."),
      SYNCOPT_KEY(eval, batch, at_least(1), "", "Examples per evaluation batch."),
      SYNCOPT_KEY(eval, bn_batches, at_least(1), "",
                  "Models with batch norm: before each evaluation, the statistics of theta and, "
                  "apart, of its EMA are computed on this many training batches of "
                  "train.batch examples, the same seeded ones every time (\"precise BN\", "
                  "docs/bn.md)."),
      // [compute]
      SYNCOPT_KEY(compute, backend, no_range(), "",
                  "Compute backend (cuda needs a CUDA build and a GPU).", "cpu", "cuda"),
      SYNCOPT_KEY(compute, threads, at_least(1), "", "CPU threads per rank (oneDNN / OpenMP)."),
      // [sim] (syncopt simulate and plan; training ignores it)
      SYNCOPT_KEY(sim, workers, at_least(1), "",
                  "Simulated workers K (there is no MPI world to count them); N = K - "
                  "train.backups in sync and timeout."),
      SYNCOPT_KEY(sim, compute_ms, above(0), "",
                  "Mean compute time of one gradient, in ms (ignored with --from, which "
                  "replays the run's measured times)."),
      SYNCOPT_KEY(sim, compute_cv, at_least(0), "",
                  "Coefficient of variation (stddev / mean) of the compute time; 0 = every "
                  "gradient takes exactly sim.compute_ms."),
      SYNCOPT_KEY(sim, compute_dist, no_range(), "",
                  "Distribution of the compute time, with mean sim.compute_ms and cv "
                  "sim.compute_cv.",
                  "lognormal", "gamma"),
      SYNCOPT_KEY(sim, overhead_ms, at_least(0), "",
                  "Worker time per gradient outside compute and the network (loading the "
                  "batch, copies); --from measures it."),
      SYNCOPT_KEY(sim, apply_ms, at_least(0), "",
                  "Shard time per update (aggregation and optimiser), during which it "
                  "receives nothing; --from measures it."),
      SYNCOPT_KEY(sim, poll_max_us, at_least(0), "",
                  "An idle shard tests for messages after back-off sleeps of 40, 80, 160, ... us "
                  "up to this (syncopt's own loop: 500), so messages arriving during one sleep "
                  "are taken together; 0 = every message is taken the moment it arrives."),
      SYNCOPT_KEY(sim, latency_us, at_least(0), "", "One-way latency of every message, in us."),
      SYNCOPT_KEY(sim, bandwidth_gbps, at_least(0), "",
                  "Bandwidth of every node's link, per direction, in Gbit/s; a shard sends "
                  "its replies one after another over it; 0 = unlimited."),
      SYNCOPT_KEY(sim, param_count, at_least(0), "",
                  "Model size in floats, which sets the message sizes; 0 = the parameter "
                  "count of model.name."),
      SYNCOPT_KEY(sim, seed, no_range(), "0 .. 2^63-1",
                  "Seed of the compute-time draws (stragglers keep stragglers.seed)."),
  };
}
#undef SYNCOPT_KEY

const std::vector<std::string_view>& sections() {
  static const std::vector<std::string_view> kSections = [] {
    std::vector<std::string_view> out;
    for (const auto& spec : key_specs()) {
      if (out.empty() || out.back() != spec.section) out.push_back(spec.section);
    }
    return out;
  }();
  return kSections;
}

bool is_section(std::string_view name) {
  const auto& all = sections();
  return std::find(all.begin(), all.end(), name) != all.end();
}

const KeySpec* find_spec(std::string_view section, std::string_view key) {
  for (const auto& spec : key_specs()) {
    if (spec.section == section && spec.key == key) return &spec;
  }
  return nullptr;
}

const KeySpec& spec_of(std::string_view section, std::string_view key) {
  const KeySpec* spec = find_spec(section, key);
  if (spec == nullptr)
    throw InternalError("config: no key " + std::string(section) + "." + std::string(key));
  return *spec;
}

// ---------------------------------------------------------------- text helpers

std::string trim(std::string_view s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return {};
  const auto e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

std::string join(const std::vector<std::string_view>& items, std::string_view sep) {
  std::string out;
  for (const auto& item : items) {
    if (!out.empty()) out += sep;
    out += item;
  }
  return out;
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::string::size_type start = 0;
  while (true) {
    const auto nl = text.find('\n', start);
    if (nl == std::string::npos) {
      lines.push_back(text.substr(start));
      return lines;
    }
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += '\n';
    out += lines[i];
  }
  return out;
}

// Shortest text that reads back to the same double (to_chars round-trips).
std::string format_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  char buf[64];
  const auto res = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, res.ptr);
}

// A TOML float literal: "1" would read back as an integer, so add ".0".
std::string toml_float(double v) {
  std::string s = format_number(v);
  if (std::isfinite(v) && s.find_first_of(".eE") == std::string::npos) s += ".0";
  return s;
}

// A TOML basic string, escaped so that any text reads back unchanged.
std::string toml_string(std::string_view s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04X", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
  return out;
}

// `text` as lines of at most `width` characters, each starting with `indent`.
std::string wrap(std::string_view text, std::string_view indent, std::size_t width) {
  std::string out;
  std::string line(indent);
  std::istringstream words{std::string(text)};
  for (std::string word; words >> word;) {
    if (line.size() > indent.size() && line.size() + 1 + word.size() > width) {
      out += line + "\n";
      line = indent;
    }
    if (line.size() > indent.size()) line += ' ';
    line += word;
  }
  return out + line + "\n";
}

// `text` on one line: control characters escaped as in TOML ("\\n").
std::string printable(std::string_view text) {
  std::string out;
  for (const char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f) {
      const std::string escaped = toml_string(std::string_view(&ch, 1));
      out += escaped.substr(1, escaped.size() - 2);
    } else {
      out += ch;
    }
  }
  return out;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t subst = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, subst});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

// The closest candidate within a small edit distance, or "" (typo hints).
std::string_view closest(std::string_view word, const std::vector<std::string_view>& candidates) {
  std::string_view best;
  std::size_t best_d = std::max<std::size_t>(2, word.size() / 3) + 1;
  for (const auto& cand : candidates) {
    const std::size_t d = edit_distance(word, cand);
    if (d < best_d) {
      best_d = d;
      best = cand;
    }
  }
  return best;
}

std::vector<std::string_view> keys_of(std::string_view section) {
  std::vector<std::string_view> out;
  for (const auto& spec : key_specs()) {
    if (spec.section == section) out.push_back(spec.key);
  }
  return out;
}

// What to say after "unknown key section.key".
std::string unknown_key_hint(std::string_view section, std::string_view key) {
  if (const auto near = closest(key, keys_of(section)); !near.empty()) {
    return "; did you mean " + std::string(section) + "." + std::string(near) + "?";
  }
  for (const auto& spec : key_specs()) {
    if (spec.key == key) {
      return "; '" + std::string(key) + "' belongs to [" + std::string(spec.section) + "] (" +
             spec.path() + ")";
    }
  }
  return "; the keys of [" + std::string(section) + "] are: " + join(keys_of(section), ", ");
}

std::string unknown_section_hint(std::string_view section) {
  if (const auto near = closest(section, sections()); !near.empty()) {
    return "; did you mean [" + std::string(near) + "]?";
  }
  return "; the sections are: " + join(sections(), ", ");
}

// --------------------------------------------------------------- value text

std::string type_name(KeyType type) {
  switch (type) {
    case KeyType::kString:
      return "string";
    case KeyType::kInt:
      return "integer";
    case KeyType::kUint:
      return "integer >= 0";
    case KeyType::kFloat:
      return "float";
    case KeyType::kBool:
      return "boolean";
    case KeyType::kIntList:
      return "list of integers";
    case KeyType::kMode:
      return "string";
    case KeyType::kLayers:
      return "array of layer tables";
  }
  return "?";
}

// The value of `spec` in `cfg` as TOML text.
std::string format_value(const KeySpec& spec, const Config& cfg) {
  switch (spec.type) {
    case KeyType::kString:
      return toml_string(field_of<std::string>(spec, cfg));
    case KeyType::kInt: {
      // An integer key with a word allowed in its place (train.backups =
      // "auto") stores the word as kAutoInt.
      const std::int64_t v = field_of<std::int64_t>(spec, cfg);
      if (v == kAutoInt && !spec.choices.empty()) return toml_string(spec.choices.front());
      return std::to_string(v);
    }
    case KeyType::kUint:
      return std::to_string(field_of<std::uint64_t>(spec, cfg));
    case KeyType::kFloat:
      return toml_float(field_of<double>(spec, cfg));
    case KeyType::kBool:
      return field_of<bool>(spec, cfg) ? "true" : "false";
    case KeyType::kIntList: {
      std::string out = "[";
      for (const auto v : field_of<std::vector<std::int64_t>>(spec, cfg)) {
        if (out.size() > 1) out += ", ";
        out += std::to_string(v);
      }
      return out + "]";
    }
    case KeyType::kMode:
      return toml_string(mode_name(field_of<Mode>(spec, cfg)));
    case KeyType::kLayers:
      return layers_toml(field_of<std::vector<nn::LayerDesc>>(spec, cfg));
  }
  return "?";
}

// A valid value to show in "write e.g. ..." hints: the default, or a sample
// where the default would not show the syntax.
std::string example_value(const KeySpec& spec) {
  if (spec.type == KeyType::kIntList) return "[0, 2]";
  if (spec.type == KeyType::kLayers) return "[{ type = \"fc\" }]";
  const std::string def = format_value(spec, Config{});
  if (def == "\"\"") return "\"path/to/file\"";
  return def;
}

// "string \"abc\"", "float 0.5", "array", ... for "found ..." in messages.
std::string describe(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string: {
      std::string s = node.as_string()->get();
      if (s.size() > 40) s = s.substr(0, 37) + "...";
      return "string " + toml_string(s);
    }
    case toml::node_type::integer:
      return "integer " + std::to_string(node.as_integer()->get());
    case toml::node_type::floating_point:
      return "float " + format_number(node.as_floating_point()->get());
    case toml::node_type::boolean:
      return std::string("boolean ") + (node.as_boolean()->get() ? "true" : "false");
    case toml::node_type::array:
      return "array";
    case toml::node_type::table:
      return "table";
    case toml::node_type::date:
      return "date";
    case toml::node_type::time:
      return "time";
    case toml::node_type::date_time:
      return "date-time";
    case toml::node_type::none:
      return "nothing";
  }
  return "?";
}

// Why a value could not be stored: a phrase to put after the key
// ("expected integer, found string \"abc\""), or, when `whole`, a complete
// problem naming the key and its value (an enum name that is not one).
struct AssignError {
  std::string text;
  bool whole = false;
};

// Stores `node` into the field of `spec`, or says why it cannot. An integer
// is accepted where a float is expected; nothing else is converted.
std::optional<AssignError> assign(const KeySpec& spec, const toml::node& node, Config& cfg) {
  switch (spec.type) {
    case KeyType::kMode:
      if (const auto* v = node.as_string()) {
        if (const auto mode = mode_from_name(v->get())) {
          field_of<Mode>(spec, cfg) = *mode;
          return std::nullopt;
        }
        return AssignError{spec.path() + " = " + toml_string(v->get()) + ": must be one of " +
                               join(spec.choices, " | "),
                           true};
      }
      break;
    case KeyType::kString:
      if (const auto* v = node.as_string()) {
        field_of<std::string>(spec, cfg) = v->get();
        return std::nullopt;
      }
      break;
    case KeyType::kInt:
      if (const auto* v = node.as_integer()) {
        field_of<std::int64_t>(spec, cfg) = v->get();
        return std::nullopt;
      }
      if (const auto* v = node.as_string(); v != nullptr && !spec.choices.empty()) {
        if (v->get() == spec.choices.front()) {
          field_of<std::int64_t>(spec, cfg) = kAutoInt;
          return std::nullopt;
        }
        return AssignError{"expected integer or \"" + std::string(spec.choices.front()) +
                           "\", found " + describe(node)};
      }
      break;
    case KeyType::kUint:
      if (const auto* v = node.as_integer(); v != nullptr && v->get() >= 0) {
        field_of<std::uint64_t>(spec, cfg) = static_cast<std::uint64_t>(v->get());
        return std::nullopt;
      }
      break;
    case KeyType::kFloat:
      if (const auto* v = node.as_floating_point()) {
        field_of<double>(spec, cfg) = v->get();
        return std::nullopt;
      }
      if (const auto* v = node.as_integer()) {
        field_of<double>(spec, cfg) = static_cast<double>(v->get());
        return std::nullopt;
      }
      break;
    case KeyType::kBool:
      if (const auto* v = node.as_boolean()) {
        field_of<bool>(spec, cfg) = v->get();
        return std::nullopt;
      }
      break;
    case KeyType::kLayers:
      if (auto why = read_layers(node, field_of<std::vector<nn::LayerDesc>>(spec, cfg))) {
        return AssignError{spec.path() + ": " + *why, true};
      }
      return std::nullopt;
    case KeyType::kIntList:
      if (const auto* arr = node.as_array()) {
        std::vector<std::int64_t> values;
        for (std::size_t i = 0; i < arr->size(); ++i) {
          const auto* v = arr->get(i)->as_integer();
          if (v == nullptr) {
            return AssignError{"element " + std::to_string(i) + ": expected integer, found " +
                               describe(*arr->get(i))};
          }
          values.push_back(v->get());
        }
        field_of<std::vector<std::int64_t>>(spec, cfg) = std::move(values);
        return std::nullopt;
      }
      break;
  }
  return AssignError{"expected " + type_name(spec.type) + ", found " + describe(node)};
}

// ---------------------------------------------------------------- validation

struct Problem {
  std::string key;      // "section.key": where the problem is attributed
  std::string message;  // "train.batch = 0: must be >= 1"
};

bool in_range(double v, const Range& r) {
  // Written as positive conditions so that NaN fails them.
  const bool lo_ok = r.lo_open ? v > r.lo : v >= r.lo;
  const bool hi_ok = r.hi_open ? v < r.hi : v <= r.hi;
  return lo_ok && hi_ok;
}

bool has_range(const Range& r) { return r.lo != -kInf || r.hi != kInf; }

// ">= 1", "> 0", "in [0, 1)".
std::string range_text(const Range& r) {
  if (r.hi == kInf) return (r.lo_open ? "> " : ">= ") + format_number(r.lo);
  if (r.lo == -kInf) return (r.hi_open ? "< " : "<= ") + format_number(r.hi);
  return std::string("in ") + (r.lo_open ? "(" : "[") + format_number(r.lo) + ", " +
         format_number(r.hi) + (r.hi_open ? ")" : "]");
}

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
        if (!(field_of<std::int64_t>(spec, cfg) == kAutoInt && !spec.choices.empty()) &&
            !in_range(static_cast<double>(field_of<std::int64_t>(spec, cfg)), spec.range)) {
          add(spec, "must be " + range_text(spec.range));
        }
        break;
      case KeyType::kUint:
        // TOML integers are signed 64-bit: a larger seed could not be written back.
        if (field_of<std::uint64_t>(spec, cfg) > kMaxTomlInt)
          add(spec, "must be <= " + std::to_string(kMaxTomlInt));
        break;
      case KeyType::kString:
        if (!spec.choices.empty()) {
          const auto& v = field_of<std::string>(spec, cfg);
          if (std::find(spec.choices.begin(), spec.choices.end(), v) == spec.choices.end()) {
            add(spec, "must be one of " + join(spec.choices, " | "));
          }
        }
        break;
      case KeyType::kIntList: {
        const auto& values = field_of<std::vector<std::int64_t>>(spec, cfg);
        for (std::size_t i = 0; i < values.size(); ++i) {
          if (!in_range(static_cast<double>(values[i]), spec.range)) {
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
      case KeyType::kBool:
      case KeyType::kMode:    // only valid names can be stored
      case KeyType::kLayers:  // checked as read; shapes when the model is built
        break;
    }
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
  if (cfg.data.path.empty() && cfg.data.name != "synthetic") {
    add(spec_of("data", "path"),
        "must name the data set directory when data.name = \"" + cfg.data.name + "\"");
  }
  if (cfg.train.steps == 0 && !(cfg.train.epochs > 0)) {
    add(spec_of("train", "epochs"), "must be > 0 when train.steps = 0 (set one of the two)");
  }
  if (cfg.train.backups == kAuto && !cfg.optim.scale_lr_by_n) {
    add(spec_of("train", "backups"),
        "needs optim.scale_lr_by_n = true: the lr follows the N "
        "that is chosen");
  }
  if (cfg.train.clock == "virtual" && !traits(cfg.train.mode).versioned) {
    add(spec_of("train", "clock"),
        "applies to train.mode = sync or timeout (use syncopt simulate "
        "for the other modes in modelled time)");
  }
  if (const double s = cfg.train.simulated_staleness; s > 0) {
    const auto& spec = spec_of("train", "simulated_staleness");
    const std::string& dist = cfg.train.staleness_dist;
    if (cfg.train.mode != Mode::kLocal) {
      add(spec,
          "is simulated in train.mode = \"local\" only (the other modes have real "
          "staleness: measure it with async)");
    } else if (dist == "fixed" && std::floor(s) != s) {
      add(spec, "must be a whole number with train.staleness_dist = \"fixed\"");
    } else if (dist == "uniform" && std::floor(2 * s) != 2 * s) {
      add(spec,
          "must be a multiple of 0.5 with train.staleness_dist = \"uniform\" (drawn "
          "from 0 .. 2s)");
    } else if (cfg.train.staleness_max > 0 && !(static_cast<double>(cfg.train.staleness_max) > s) &&
               (dist == "geometric" || dist == "exponential")) {
      add(spec_of("train", "staleness_max"), "must be above train.simulated_staleness");
    }
  }
  if (cfg.optim.lr > 0.0 && !(cfg.optim.final_lr < cfg.optim.lr)) {
    add(spec_of("optim", "final_lr"), "must be below optim.lr (the schedule decreases to it)");
  }
  if (cfg.model.name == "custom" && cfg.model.layers.empty()) {
    add(spec_of("model", "name"),
        "needs the layers: add [[model.layers]] tables (docs/models.md), or pick a built-in "
        "model");
  }
  if (cfg.model.name != "custom" && !cfg.model.layers.empty()) {
    add(spec_of("model", "name"),
        "is a built-in model, but model.layers describes one: set model.name = \"custom\" to "
        "train the layers, or remove them");
  }
  if (cfg.stragglers.model == "trace" && cfg.stragglers.trace.empty()) {
    add(spec_of("stragglers", "model"), "needs stragglers.trace, the path of the trace to replay");
  }
}

std::vector<Problem> check(const Config& cfg) {
  std::vector<Problem> out;
  const auto add = [&](const KeySpec& spec, const std::string& what) {
    out.push_back({spec.path(), spec.path() + " = " + format_value(spec, cfg) + ": " + what});
  };
  check_each_key(cfg, add);
  check_across_keys(cfg, add);
  return out;
}

// -------------------------------------------------------------------- loading

// The [header] in force at 1-based line `line` (exclusive), "" at top level.
std::string table_at(const std::vector<std::string>& lines, std::size_t line) {
  for (std::size_t i = std::min(line, lines.size() + 1); i-- > 1;) {
    const std::string t = trim(lines[i - 1]);
    if (t.empty() || t[0] != '[') continue;
    const std::size_t open = t.find_first_not_of('[');
    const std::size_t close = t.find(']', open);
    if (open == std::string::npos || close == std::string::npos) continue;
    return trim(std::string_view(t).substr(open, close - open));
  }
  return {};
}

// The text between the last pair of single quotes of a toml++ message.
std::string quoted_name(std::string_view desc) {
  const auto end = desc.rfind('\'');
  if (end == std::string_view::npos || end == 0) return {};
  const auto begin = desc.rfind('\'', end - 1);
  if (begin == std::string_view::npos) return {};
  return std::string(desc.substr(begin + 1, end - begin - 1));
}

std::string dotted(const std::string& table, const std::string& key) {
  if (table.empty()) return key;
  if (key.empty()) return table;
  return table + "." + key;
}

class Loader {
 public:
  void read_file(const std::string& path) {
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (!std::filesystem::exists(status)) {
      add(path + ": config file not found; check the path (relative paths start at " +
          std::filesystem::current_path(ec).string() + ")");
      return;
    }
    if (std::filesystem::is_directory(status)) {
      add(path + ": is a directory, not a config file; give the path of a .toml file");
      return;
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      add(path + ": cannot open the config file (" + std::strerror(errno) +
          "); check its permissions");
      return;
    }
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) {
      add(path + ": cannot read the config file (" + std::strerror(errno) + ")");
      return;
    }
    read_text(text.str(), path);
  }

  void read_text(const std::string& text, const std::string& origin) {
    Reading r{origin, split_lines(text), {}, {}, {}, {}};
    parse_recovering(r);
    report_duplicates(r);
    if (r.doc) read_sections(r);
    std::stable_sort(r.found.begin(), r.found.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (auto& f : r.found) add(std::move(f.second));
  }

 private:
  // One file being read: its lines (edited while recovering), the document
  // once parsed, and the problems found, by line.
  struct Duplicate {
    std::size_t line;
    std::string path;
    bool is_table;
  };
  struct Reading {
    std::string origin;
    std::vector<std::string> lines;
    std::optional<toml::table> doc;
    std::vector<Duplicate> duplicates;
    std::map<std::string, std::string> renamed;  // stand-in table name -> the repeated header's
    std::vector<std::pair<std::size_t, std::string>> found;  // (line, message)
    std::string at(std::size_t line) const { return origin + ":" + std::to_string(line) + ": "; }
  };

  // toml++ stops at its first error. A duplicate key is recovered from by
  // blanking its line, so the rest of the file is still checked; after a
  // syntax error the file cannot be read further.
  static void parse_recovering(Reading& r) {
    for (int attempt = 0; attempt <= kMaxRecoveries && !r.doc; ++attempt) {
      try {
        r.doc = toml::parse(std::string_view(join_lines(r.lines)), std::string_view(r.origin));
      } catch (const toml::parse_error& e) {
        const std::size_t line = e.source().begin.line;
        const std::string desc(e.description());
        const bool in_file =
            line >= 1 && line <= r.lines.size() && !trim(r.lines[line - 1]).empty();
        if (desc.find("cannot redefine existing") != std::string::npos && in_file &&
            attempt < kMaxRecoveries) {
          recover_duplicate(r, line, desc);
          continue;
        }
        std::string near;
        if (in_file) {
          const std::string& t = r.lines[line - 1];
          const auto eq = t.find('=');
          if (eq != std::string::npos && t.find('"') > eq) {
            near =
                " near " + dotted(table_at(r.lines, line), trim(std::string_view(t).substr(0, eq)));
          }
        }
        r.found.emplace_back(line, r.origin + ":" + std::to_string(line) + ":" +
                                       std::to_string(e.source().begin.column) + ": syntax error" +
                                       near + ": " + desc +
                                       "; fix the TOML syntax (https://toml.io); the rest of the "
                                       "file was not checked");
        break;
      }
    }
  }

  static void recover_duplicate(Reading& r, std::size_t line, const std::string& desc) {
    const bool is_table = trim(r.lines[line - 1]).front() == '[';
    const std::string name = quoted_name(desc);
    r.duplicates.push_back(
        {line, is_table ? name : dotted(table_at(r.lines, line), name), is_table});
    if (is_table) {
      // Blanking a repeated [train] would move its keys into the table
      // above; read them under a stand-in name and check them as [train].
      const std::string stand_in = std::string(kDuplicateTable) + std::to_string(line);
      r.renamed[stand_in] = name;
      r.lines[line - 1] = "[" + stand_in + "]";
    } else {
      r.lines[line - 1].clear();
    }
  }

  static void report_duplicates(Reading& r) {
    for (const auto& dup : r.duplicates) {
      std::string first;
      if (r.doc) {
        if (const auto* node = r.doc->at_path(dup.path).node();
            node != nullptr && node->source().begin.line > 0) {
          first = std::to_string(node->source().begin.line);
        }
      }
      if (dup.is_table) {
        r.found.emplace_back(dup.line,
                             r.at(dup.line) + "duplicate section [" + dup.path + "]" +
                                 (first.empty() ? "" : " (first opened on line " + first + ")") +
                                 "; merge them into one [" + dup.path + "] table");
      } else {
        r.found.emplace_back(dup.line,
                             r.at(dup.line) + "duplicate key " + dup.path +
                                 (first.empty() ? "" : " (first set on line " + first + ")") +
                                 "; keep only one of them");
      }
    }
  }

  // Every [section] of the document: known, a table, and its keys.
  void read_sections(Reading& r) {
    for (auto&& [section_key, section_node] : *r.doc) {
      std::string section(section_key.str());
      std::size_t line = section_key.source().begin.line;
      if (line == 0) line = section_node.source().begin.line;
      // The keys of a repeated header, checked as keys of the first one.
      const toml::table* first_table = nullptr;
      if (const auto it = r.renamed.find(section); it != r.renamed.end()) {
        section = it->second;
        first_table = r.doc->get_as<toml::table>(section);
      }
      if (!is_section(section)) {
        r.found.emplace_back(line, r.at(line) + outside_section(section, section_node));
        continue;
      }
      const auto* table = section_node.as_table();
      if (table == nullptr) {
        r.found.emplace_back(line, r.at(line) + section + ": expected a table [" + section +
                                       "], found " + describe(section_node) +
                                       "; write the section as [" + section + "]");
        continue;
      }
      read_keys(r, section, *table, first_table);
    }
  }

  // What to say of a top-level name that is no section.
  static std::string outside_section(const std::string& name, const toml::node& node) {
    if (node.is_table()) return "unknown section [" + name + "]" + unknown_section_hint(name);
    // A key written before any [section] header.
    for (const auto& spec : key_specs()) {
      if (spec.key == name) {
        return "key '" + name + "' is outside any section; put it under [" +
               std::string(spec.section) + "] (" + spec.path() + ")";
      }
    }
    return "key '" + name + "' is outside any section; every key belongs to one of [" +
           join(sections(), "], [") + "]";
  }

  void read_keys(Reading& r, const std::string& section, const toml::table& table,
                 const toml::table* first_table) {
    for (auto&& [key_key, value] : table) {
      const std::string key(key_key.str());
      std::size_t kline = key_key.source().begin.line;
      if (kline == 0) kline = value.source().begin.line;
      if (const toml::node* first = first_table ? first_table->get(key) : nullptr) {
        r.found.emplace_back(
            kline, r.at(kline) + "duplicate key " + section + "." + key + " (first set on line " +
                       std::to_string(first->source().begin.line) + "); keep only one of them");
        continue;
      }
      const KeySpec* spec = find_spec(section, key);
      if (spec == nullptr) {
        r.found.emplace_back(kline, r.at(kline) + "unknown key " + section + "." + key +
                                        unknown_key_hint(section, key));
        continue;
      }
      if (auto why = assign(*spec, value, m_cfg)) {
        r.found.emplace_back(kline, why->whole ? r.at(kline) + why->text
                                               : r.at(kline) + spec->path() + ": " + why->text +
                                                     "; write e.g. " + std::string(spec->key) +
                                                     " = " + example_value(*spec));
      } else {
        m_origin[spec->path()] = r.origin + ":" + std::to_string(kline);
      }
    }
  }

 public:
  void apply_override(const std::string& override_text) {
    const std::string where = "--set " + printable(override_text);
    const auto eq = override_text.find('=');
    if (eq == std::string::npos) {
      add(where + ": expected section.key=value, e.g. --set train.batch=64");
      return;
    }
    const std::string path = trim(std::string_view(override_text).substr(0, eq));
    const std::string text = trim(std::string_view(override_text).substr(eq + 1));
    const auto dot = path.find('.');
    if (dot == std::string::npos || dot == 0 || dot + 1 == path.size() ||
        path.find('.', dot + 1) != std::string::npos) {
      add(where + ": '" + path + "' is not section.key; write e.g. --set train.batch=64");
      return;
    }
    const std::string section = path.substr(0, dot);
    const std::string key = path.substr(dot + 1);
    if (!is_section(section)) {
      add(where + ": unknown section [" + section + "]" + unknown_section_hint(section));
      return;
    }
    const KeySpec* spec = find_spec(section, key);
    if (spec == nullptr) {
      add(where + ": unknown key " + path + unknown_key_hint(section, key));
      return;
    }

    // The value is read as TOML (`k = <value>`), so it is typed like the file.
    std::optional<toml::table> parsed;
    try {
      auto table = toml::parse(std::string_view("v = " + text));
      if (table.size() == 1 && table.contains("v")) parsed = std::move(table);
    } catch (const toml::parse_error&) {
    }
    const toml::node* node = parsed ? parsed->get("v") : nullptr;
    // Quotes rarely survive the shell: a string key takes the bare text
    // (`--set train.mode=async`) unless it was written as a TOML string.
    const bool named =
        spec->type == KeyType::kString || spec->type == KeyType::kMode ||
        (spec->type == KeyType::kInt && !spec->choices.empty() && text == spec->choices.front());
    if (named && (node == nullptr || !node->is_string())) {
      const toml::value<std::string> bare(text);
      if (auto why = assign(*spec, bare, m_cfg)) {
        add(where + ": " + why->text);
        return;
      }
      m_origin[path] = where;
      return;
    }
    if (node == nullptr) {
      add(where + ": " + path + ": expected " + type_name(spec->type) + ", found '" +
          printable(text) + "' (not a TOML value); write e.g. --set " + path + "=" +
          example_value(*spec));
      return;
    }
    if (auto why = assign(*spec, *node, m_cfg)) {
      add(why->whole ? where + ": " + why->text
                     : where + ": " + path + ": " + why->text + "; write e.g. --set " + path + "=" +
                           example_value(*spec));
      return;
    }
    m_origin[path] = where;
  }

  // Validates the result; throws one ConfigError listing every problem.
  Config finish() {
    for (const auto& p : check(m_cfg)) {
      const auto it = m_origin.find(p.key);
      add(it != m_origin.end() ? it->second + ": " + p.message : p.message);
    }
    if (m_problems.empty()) return m_cfg;
    std::string message =
        "invalid configuration: " + std::to_string(m_problems.size()) +
        (m_problems.size() == 1 ? " problem" : " problems") +
        " (every key is described by `syncopt train --help` and in configs/README.md):";
    for (const auto& p : m_problems) message += "\n  " + p;
    throw ConfigError(message);
  }

 private:
  void add(std::string problem) { m_problems.push_back(std::move(problem)); }

  Config m_cfg;
  std::vector<std::string> m_problems;
  std::map<std::string, std::string> m_origin;  // "section.key" -> "file:line" or "--set ..."
};

}  // namespace

Config load(const std::string& path, const std::vector<std::string>& overrides) {
  Loader loader;
  loader.read_file(path);
  for (const auto& o : overrides) loader.apply_override(o);
  return loader.finish();
}

Config parse(const std::string& toml_text, const std::string& origin,
             const std::vector<std::string>& overrides) {
  Loader loader;
  loader.read_text(toml_text, origin);
  for (const auto& o : overrides) loader.apply_override(o);
  return loader.finish();
}

std::vector<std::string> validate(const Config& cfg) {
  std::vector<std::string> out;
  for (auto& p : check(cfg)) out.push_back(std::move(p.message));
  return out;
}

std::string to_toml(const Config& cfg) {
  std::string out;
  std::string_view section;
  for (const auto& spec : key_specs()) {
    if (spec.section != section) {
      if (!out.empty()) out += '\n';
      section = spec.section;
      out += '[';
      out += section;
      out += "]\n";
    }
    out += spec.key;
    out += " = " + format_value(spec, cfg) + "\n";
  }
  return out;
}

std::string key_reference() {
  const Config defaults;
  std::string out =
      "Configuration keys. A TOML file has sections [run], [data], ...; every key has\n"
      "a default. Override any key with --set section.key=value (repeatable; the\n"
      "value is TOML, bare text is taken as a string). Unknown keys are errors.\n";
  std::string_view section;
  for (const auto& spec : key_specs()) {
    if (spec.section != section) {
      section = spec.section;
      out += "\n[" + std::string(section) + "]\n";
    }
    std::string head = "  " + spec.path() + " = " + format_value(spec, defaults);
    std::string allowed = spec.type == KeyType::kUint ? "integer" : type_name(spec.type);
    if (!spec.choices.empty() && spec.type == KeyType::kInt) {
      allowed += " or \"" + std::string(spec.choices.front()) + "\"";
    } else if (!spec.choices.empty()) {
      allowed += ", one of " + join(spec.choices, " | ");
    }
    if (has_range(spec.range)) {
      allowed += spec.type == KeyType::kIntList ? ", each " : ", ";
      allowed += range_text(spec.range);
    }
    if (!spec.rule.empty()) allowed += ", " + std::string(spec.rule);
    constexpr std::size_t kColumn = 42;
    head += head.size() < kColumn ? std::string(kColumn - head.size(), ' ') : "  ";
    out += head + allowed + "\n" + wrap(spec.meaning, "      ", 80);
  }
  return out;
}

}  // namespace syncopt::config
