// The experiment configuration: plain structs with defaults (docs/design.md,
// "Configuration"), loaded from a TOML file plus `--set section.key=value`
// overrides. validate() is a pure function of the config so every rank
// agrees on it. Enum-like keys are enums (config/enums.hpp), parsed once.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "config/enums.hpp"
#include "config/mode.hpp"
#include "nn/layer.hpp"

namespace syncopt::config {

struct RunConfig {
  std::string name = "run";
  std::string dir = "runs";
  std::uint64_t seed = 1;
  bool resume = false;     // continue runs/<name>/ from its latest checkpoint
  bool reshape = false;    // ... on other ranks than those that saved it
  bool overwrite = false;  // replace an existing runs/<name>/ (never by default)
  double checkpoint_every_s =
      600.0;  // 0 = off (a checkpoint is still saved at the end and on a stop signal)
  std::int64_t checkpoint_every_steps = 0;          // 0 = off
  std::int64_t keep_checkpoints = 2;                // newest checkpoints kept on disk
  ProgressOutput progress = ProgressOutput::kAuto;  // metrics::Progress
  std::int64_t progress_every_steps = 50;  // progress line period when the line is not live
  bool tensorboard = true;                 // TensorBoard event files under <run>/tb/
  std::int64_t flight_events = 512;        // the flight recorder's ring per rank; 0 = off

  bool operator==(const RunConfig&) const = default;
};

struct DataConfig {
  DataSet name = DataSet::kFashionMnist;
  std::string path = "/usr/share/datasets/fashion-mnist";
  bool augment = false;
  double augment_max_rotate_deg = 10.0;  // uniform in [-max, max]
  double augment_max_zoom = 0.1;         // scale uniform in [1-z, 1+z]
  std::int64_t limit_train = 0;          // 0 = all
  std::int64_t limit_test = 0;           // 0 = all
  std::int64_t synthetic_train = 2048;   // synthetic: examples
  std::int64_t synthetic_test = 512;
  // npy: file stems in `path`; hdf5: dataset names in the file `path`.
  std::string train_images = "train_images", train_labels = "train_labels";
  std::string test_images = "test_images", test_labels = "test_labels";
  std::int64_t classes = 0;  // npy, hdf5: 0 = the largest label + 1

  bool operator==(const DataConfig&) const = default;
};

struct ModelConfig {
  ModelName name = ModelName::kCnn;  // cnn | mlp | logreg | resnet20 | resnet18 | custom
  bool weight_norm = true;
  std::int64_t mlp_hidden = 128;
  std::vector<nn::LayerDesc> layers;  // custom: [[model.layers]] (config/model_layers.hpp)

  bool operator==(const ModelConfig&) const = default;
};

struct OptimConfig {
  OptimizerName name = OptimizerName::kSgd;
  double lr = 0.05;
  double momentum = 0.9;
  double rms_decay = 0.9;
  double eps = 1e-8;
  Schedule schedule = Schedule::kConstant;
  double decay_rate = 0.94;  // exponential: lr *= decay_rate every decay_epochs
  double decay_epochs = 2.0;
  double anneal_epochs = 0.0;  // linear_anneal: over the last E epochs (0 = the whole run)
  double warmup_epochs = 0.0;  // warmup_*: linear ramp from 0 over this many epochs
  double final_lr = 0.0;       // exponential: floor; linear_anneal: where it ends
  bool scale_lr_by_n = false;
  double ema = 0.9999;  // 0 disables the EMA
  double weight_decay = 0.0;

  bool operator==(const OptimConfig&) const = default;
};

// A count that may also be "auto" (train.backups): a real variant, so that
// "auto" can never leak into arithmetic as a number.
struct AutoCount {
  bool operator==(const AutoCount&) const = default;
};
using CountOrAuto = std::variant<std::int64_t, AutoCount>;
inline bool is_auto(const CountOrAuto& c) { return std::holds_alternative<AutoCount>(c); }
// A float that may also be "auto" (train.compute_budget_ms), the same way.
using FloatOrAuto = std::variant<double, AutoCount>;
inline bool is_auto(const FloatOrAuto& c) { return std::holds_alternative<AutoCount>(c); }

struct TrainConfig {
  Mode mode = Mode::kLocal;               // parsed once from the name (config/mode.hpp)
  std::int64_t batch = 32;                // per worker
  std::int64_t steps = 0;                 // updates; 0 = use epochs
  double epochs = 1.0;                    // epochs of accepted examples
  CountOrAuto backups = std::int64_t{1};  // b (N = workers - b), or auto (adaptive b)
  std::int64_t softsync_c = 1;
  std::int64_t ssp_bound = 3;
  double timeout_ms = 100.0;
  Clock clock = Clock::kWall;  // docs/design.md, "Clocks"
  bool agree_shards = true;    // several shards apply the same N workers (shard 0 decides)
  // Simulated staleness (local mode, replica/staleness.hpp): the mean s in
  // updates (0 = off), its distribution, and the geometric's largest draw.
  double simulated_staleness = 0.0;
  StalenessDist staleness_dist = StalenessDist::kFixed;
  std::int64_t staleness_max = 0;  // 0 = ceil(4 s)
  // allreduce: micro-batches of this many examples (0 = the whole batch at
  // once), and the time budget they are computed in (ms, 0 = none; auto:
  // chosen from recent micro-batch times, keeping at least
  // compute_budget_keep of the examples). docs/design.md §3.
  std::int64_t micro_batch = 0;
  FloatOrAuto compute_budget_ms = 0.0;
  double compute_budget_keep = 0.75;

  bool operator==(const TrainConfig&) const = default;
};

struct ClusterConfig {
  std::int64_t ps = 1;
  bool evaluator = false;
  double dead_after_s = 60.0;  // silence after which a rank is dead

  bool operator==(const ClusterConfig&) const = default;
};

struct StragglerConfig {
  StragglerModel model = StragglerModel::kNone;
  std::vector<std::int64_t> workers;
  double prob = 0.0;
  double factor = 1.0;
  double mean_ms = 0.0;
  double sigma = 1.0;
  double alpha = 2.0;
  std::string trace;
  std::uint64_t seed = 0;
  StragglerPhase phase = StragglerPhase::kCompute;

  bool operator==(const StragglerConfig&) const = default;
};

struct EvalConfig {
  std::int64_t every_steps = 0;
  double every_s = 0.0;
  std::int64_t batch = 1000;
  std::int64_t bn_batches = 50;  // batch norm: training batches of its statistics (docs/bn.md)

  bool operator==(const EvalConfig&) const = default;
};

struct ComputeConfig {
  Backend backend = Backend::kCpu;
  std::int64_t threads = 1;
  Precision precision = Precision::kFp32;
  bool tf32 = false;             // cuda: TF32 tensor cores in the FP32 path
  bool deterministic = false;    // cuda: heuristic deterministic algorithms, no timing
  double memory_limit_gb = 0.0;  // per process; 0: from the machine (common/memory.hpp)

  bool operator==(const ComputeConfig&) const = default;
};

// How gradients and parameters travel between workers and shards
// (docs/design.md §4): per layer bucket, overlapping compute, or whole.
struct ExchangeConfig {
  bool pipeline = true;
  std::int64_t bucket_bytes = 262144;
  // Element type of gradients and parameters between workers and shards
  // (bf16: half the bytes; the shard still accumulates and applies in FP32).
  Precision wire = Precision::kFp32;

  bool operator==(const ExchangeConfig&) const = default;
};

// `syncopt simulate` (lib/sim/): the discrete-event model of a cluster, in
// seconds of simulated time. Training itself ignores this section.
struct SimConfig {
  std::int64_t workers = 5;  // K, the simulated workers
  double compute_ms = 10.0;  // mean compute time of one gradient
  double compute_cv = 0.1;   // its coefficient of variation (0 = fixed)
  ComputeDist compute_dist = ComputeDist::kLognormal;
  double overhead_ms = 0.0;           // worker time per gradient outside compute
  double apply_ms = 0.0;              // shard time per update (aggregate + optimiser)
  double poll_max_us = 500.0;         // idle shard loop's longest back-off sleep; 0 = none
  double latency_us = 50.0;           // one-way, per message
  double bandwidth_gbps = 10.0;       // per link and direction; 0 = unlimited
  std::int64_t shards_per_host = 1;   // shards sharing one host's link
  std::int64_t workers_per_host = 1;  // workers sharing one host's link
  LinkSharing link_sharing = LinkSharing::kSerial;  // a link's messages: in turn, or shared
  std::int64_t param_count = 0;                     // floats of the model; 0 = model.name's
  std::uint64_t seed = 1;                           // compute-time draws
  SimRecords records = SimRecords::kShard0;         // the step records steps.jsonl gets

  bool operator==(const SimConfig&) const = default;
};

struct Config {
  RunConfig run;
  DataConfig data;
  ModelConfig model;
  OptimConfig optim;
  TrainConfig train;
  ClusterConfig cluster;
  StragglerConfig stragglers;
  EvalConfig eval;
  ComputeConfig compute;
  ExchangeConfig exchange;
  SimConfig sim;

  // Field-by-field equality: the to_toml() round trip is tested with it.
  bool operator==(const Config&) const = default;
};

// Load `path` (TOML), then apply each "section.key=value" override in order.
// Every problem found (missing file, TOML syntax, unknown key, duplicate key,
// wrong type, out-of-range value, bad override) is collected; if there is any,
// one ConfigError (exit 78) carrying all of them is thrown, each naming the
// key and, for file problems, the file and line. A missing file is also 78:
// the config is the job's description, not its input data. A file that says
// nothing (empty, or comments only) is a UsageError (64) naming it.
Config load(const std::string& path, const std::vector<std::string>& overrides);

// Parse from TOML text (for tests). `origin` names the source in messages.
Config parse(const std::string& toml_text, const std::string& origin,
             const std::vector<std::string>& overrides);

// Every semantic problem of a fully built config, one message each
// ("train.batch = 0: must be >= 1"). Empty when valid. Pure.
std::vector<std::string> validate(const Config& cfg);

// The resolved config as TOML text, every key written, so that
// `syncopt train runs/<name>/config.toml` repeats the run.
std::string to_toml(const Config& cfg);

// A reference of every section and key: type, default, allowed values and
// meaning. Printed by `syncopt train --help` and kept in configs/README.md.
std::string key_reference();

}  // namespace syncopt::config
