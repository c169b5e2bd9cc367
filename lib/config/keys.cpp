// The key table (see keys.hpp): one row per key. New keys go here and
// nowhere else; an enum key's names come from its enum (config/enums.hpp).
#include "config/keys.hpp"

#include <algorithm>
#include <utility>

#include "common/error.hpp"
#include "config/text.hpp"

namespace syncopt::config::detail {
namespace {

// The type of the field is deduced, so a spec can never disagree with its struct.
// clang-format off
#define SYNCOPT_KEY(sec, name, range, rule, meaning)                            \
  KeySpec {                                                                     \
    #sec, #name,                                                                \
    key_type_of<std::remove_cvref_t<decltype(std::declval<Config&>().sec.name)>>(), \
    [](Config& c) -> void* { return &c.sec.name; },                             \
    enum_ops<std::remove_cvref_t<decltype(std::declval<Config&>().sec.name)>>(), \
    range, rule, meaning                                                        \
  }
// clang-format on

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
      SYNCOPT_KEY(run, reshape, no_range(), "",
                  "With run.resume: the checkpoint may resume on another number of ranks than "
                  "saved it (other shards with cluster.ps, other workers: N = workers - b), the "
                  "mode unchanged; theta, optimiser state and EMA are cut again for the shards "
                  "and each epoch's data goes on where it was (docs/design.md section 10). "
                  "Without it another -np is refused (78)."),
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
                  "live when stderr, or under mpirun mpirun's stderr, is a terminal."),
      SYNCOPT_KEY(run, progress_every_steps, at_least(1), "",
                  "Progress line period, in steps, when the progress line is not live."),
      SYNCOPT_KEY(run, tensorboard, no_range(), "",
                  "Write TensorBoard event files to <run.dir>/<run.name>/tb/ (loss, lr, steps/s, "
                  "drops, staleness, arrival-time histograms, test accuracy with and without "
                  "EMA), so tensorboard --logdir <run.dir> shows runs side by side."),
      SYNCOPT_KEY(run, flight_events, within(0, false, 1048576, false), "",
                  "The flight recorder: each rank keeps its last N message events (sends and "
                  "receives posted, completed, cancelled; collectives) and every operation in "
                  "flight, and writes them to <run>/flight/rank-<r>.jsonl when it finds a peer "
                  "silent, when the run ends on an error, and on SIGUSR2 (syncopt report "
                  "explains them); 0 = off."),
      // [data]
      SYNCOPT_KEY(
          data, name, no_range(), "",
          "Data set: fashion-mnist (Debian package), idx (MNIST-format IDX files in data.path), "
          "cifar10 (binary batches in data.path), npy (NumPy .npy arrays in data.path), hdf5 "
          "(datasets of the HDF5 file data.path), synthetic (seeded, for tests); npy and hdf5 "
          "stay on disk (docs/data.md)."),
      SYNCOPT_KEY(data, path, no_range(), "non-empty unless data.name = synthetic",
                  "Directory holding the data set files; hdf5: the HDF5 file."),
      SYNCOPT_KEY(data, train_images, no_range(), "non-empty",
                  "npy: <data.path>/<this>.npy, images N x C x H x W (or N x H x W) of uint8 or "
                  "float32; hdf5: the dataset of that name (a path in the file)."),
      SYNCOPT_KEY(data, train_labels, no_range(), "non-empty",
                  "npy, hdf5: the training labels, integers, shape (N,) or (N, 1)."),
      SYNCOPT_KEY(data, test_images, no_range(), "non-empty", "npy, hdf5: the test images."),
      SYNCOPT_KEY(data, test_labels, no_range(), "non-empty", "npy, hdf5: the test labels."),
      SYNCOPT_KEY(data, classes, within(0, false, 100000, false), "",
                  "npy, hdf5: number of classes, labels in [0, classes); 0 = the largest label "
                  "of either set + 1."),
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
                  "`syncopt train CONFIG --dry-run` prints the model layer by layer."),
      SYNCOPT_KEY(model, weight_norm, no_range(), "",
                  "cnn, mlp, logreg: weight normalization in every layer (the resnets use batch "
                  "norm; custom layers set weight_norm per conv / fc)."),
      SYNCOPT_KEY(model, mlp_hidden, int_from(1), "", "mlp: hidden units."),
      SYNCOPT_KEY(
          model, layers, no_range(), "model.name = custom",
          "custom: the layers in order, as [[model.layers]] tables (or an inline array "
          "of tables); each reads the previous layer's output. Types and attributes "
          "(docs/models.md): conv (out, kernel = 3, stride = 1, pad = 0, bias = true, "
          "weight_norm = false); bn (eps = 1e-5); relu; add (from = an earlier layer's "
          "name or \"input\", shortcut = identity | projection: a 1x1 conv and bn on "
          "the shortcut when the shapes differ); maxpool and avgpool (kernel = 2, stride "
          "= kernel, pad = 0); gap (global average pooling); fc (out = the class count, "
          "bias, weight_norm); dropout (rate = 0.5); flatten; gelu (x Phi(x), the exact erf "
          "form). Every layer takes a name "
          "(default: type and position, e.g. relu4)."),
      // [optim]
      SYNCOPT_KEY(optim, name, no_range(), "", "Optimizer, both with momentum."),
      SYNCOPT_KEY(optim, lr, above(0), "",
                  "Learning rate, before the schedule and optim.scale_lr_by_n."),
      SYNCOPT_KEY(optim, momentum, within(0, false, 1, true), "", "Momentum coefficient."),
      SYNCOPT_KEY(optim, rms_decay, within(0, false, 1, true), "",
                  "rmsprop: decay of the running average of squared gradients."),
      SYNCOPT_KEY(optim, eps, above(0), "", "rmsprop: added to the denominator."),
      SYNCOPT_KEY(optim, schedule, no_range(), "",
                  "Learning-rate schedule; epochs count accepted examples."),
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
      SYNCOPT_KEY(train, batch, int_from(1), "", "Examples per worker per step."),
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
                  "update is in its record."),
      SYNCOPT_KEY(train, softsync_c, int_from(1), "", "softsync: gradients aggregated per update."),
      SYNCOPT_KEY(train, ssp_bound, at_least(0), "",
                  "ssp: Ho et al.'s stale synchronous clock bound: a worker that has pushed more "
                  "than this many gradients beyond the slowest live worker waits. It bounds the "
                  "clock gap between workers, not the staleness of an applied gradient, which is "
                  "recorded and reported apart (it can exceed the bound with several workers)."),
      SYNCOPT_KEY(
          train, timeout_ms, above(0), "",
          "timeout: an update falls due when N gradients of the version arrived, or this "
          "many ms after the first of them (at least one): docs/design.md's rule (§3), not the "
          "step's start."),
      SYNCOPT_KEY(train, clock, no_range(), "virtual: sync, timeout and allreduce",
                  "wall: real arrival times decide which N of N + b count. virtual: every "
                  "gradient gets a modelled finish time (a compute time drawn from sim.compute_ms, "
                  "sim.compute_cv, sim.compute_dist and sim.seed, plus its seeded straggler "
                  "delay, not slept, from when the worker was answered); shards take gradients "
                  "in the order of those times and accept the first N, as syncopt simulate "
                  "does, so runs are bitwise repeatable for any b and records use the virtual "
                  "time axis. In allreduce the same draws and delays time each rank's step, "
                  "and a compute budget decides on them."),
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
                  "stragglers.seed, or run.seed when that is 0."),
      SYNCOPT_KEY(train, staleness_max, at_least(0), "> train.simulated_staleness if set",
                  "geometric: largest s_t (draws above are clamped); 0 = ceil(4 s)."),
      SYNCOPT_KEY(train, micro_batch, int_from(0), "allreduce only; <= train.batch",
                  "Micro-batches of this many examples (the last one takes what is left of "
                  "train.batch): each rank sums their gradients, weighted by their examples, "
                  "before the allreduce; 0 = the whole batch at once."),
      SYNCOPT_KEY(train, compute_budget_ms, at_least(0), "allreduce with train.micro_batch",
                  "DropCompute's time budget: each rank computes its micro-batches while the "
                  "next one, at the pace of its last, ends within this many ms of the step's "
                  "start (at least one), then joins the allreduce with the sum of their "
                  "gradients and their examples; the update divides by the examples of all ranks, "
                  "and the examples not computed are recorded per rank and step (grads[].skipped) "
                  "and do not count towards the epoch. 0 = no budget. \"auto\": chosen every "
                  "step, alike on every rank, from every rank's per-example time over the last 20 "
                  "steps: the largest budget whose rate (examples computed per second of step) "
                  "is within 1 % of the best, among those keeping at least "
                  "train.compute_budget_keep of the examples (docs/design.md §3)."),
      SYNCOPT_KEY(train, compute_budget_keep, within(0, true, 1, false), "",
                  "compute_budget_ms = \"auto\": the least share of the examples the "
                  "chosen budget would have kept over the last 20 steps."),
      // [cluster]
      SYNCOPT_KEY(cluster, ps, int_from(1), "", "Parameter-server shards (one rank each)."),
      SYNCOPT_KEY(cluster, evaluator, no_range(), "",
                  "One extra rank evaluates the test set during training."),
      SYNCOPT_KEY(cluster, dead_after_s, above(0), "",
                  "A rank silent this long (no heartbeat, which does not depend on step length) "
                  "is dead: a worker is excluded, and the run goes on while N live workers "
                  "remain; otherwise it stops (exit 69)."),
      // [stragglers]
      SYNCOPT_KEY(stragglers, model, no_range(), "",
                  "Injected straggler delay, drawn per worker and step."),
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
      SYNCOPT_KEY(stragglers, phase, no_range(), "data: allreduce and the workers",
                  "What a straggler is slow at: compute (its forward and backward, layer by "
                  "layer, docs/design.md §7) or data (its data loader: the slowdown is slept as "
                  "it assembles each batch, before computing; not under train.clock = virtual)."),
      // [eval]
      SYNCOPT_KEY(eval, every_steps, at_least(0), "", "Evaluate every N updates; 0 = off."),
      SYNCOPT_KEY(eval, every_s, at_least(0), "",
                  "Evaluate every S seconds of wall time; 0 = off."),
      SYNCOPT_KEY(eval, batch, int_from(1), "", "Examples per evaluation batch."),
      SYNCOPT_KEY(eval, bn_batches, int_from(1), "",
                  "Models with batch norm: before each evaluation, the statistics of theta and, "
                  "apart, of its EMA are computed on this many training batches of "
                  "train.batch examples, the same seeded ones every time (\"precise BN\", "
                  "docs/bn.md)."),
      // [compute]
      SYNCOPT_KEY(compute, backend, no_range(), "",
                  "Compute backend (cuda needs a CUDA build and a GPU)."),
      SYNCOPT_KEY(compute, threads, int_from(1), "",
                  "CPU threads per rank (oneDNN / OpenMP); more than the CPUs this process may "
                  "use is capped to them, with a warning."),
      SYNCOPT_KEY(compute, precision, no_range(), "",
                  "Arithmetic of the compute: fp32; or bf16 for convolutions, fully connected "
                  "layers, pooling, activations and adds (bf16 data, FP32 accumulation), with "
                  "batch-norm statistics, weight-norm norms, the loss and softmax in FP32. "
                  "Parameters, optimiser state and the EMA stay FP32 (master weights) wherever "
                  "the update happens, and so do checkpoints: a run may resume in the other "
                  "precision. bf16 needs AVX-512 on the CPU (fast with AVX512-BF16 or AMX) or "
                  "an Ampere or later GPU."),
      SYNCOPT_KEY(compute, tf32, no_range(), "",
                  "cuda, compute.precision = fp32: let cuDNN and cuBLAS use TF32 tensor cores "
                  "(10-bit mantissa inputs, FP32 accumulation); false keeps FP32 strict."),
      SYNCOPT_KEY(compute, deterministic, no_range(), "",
                  "cuda: convolution algorithms from cuDNN's heuristics among the deterministic "
                  "ones, without timing, so two runs agree bit for bit; false times them "
                  "(cudnnFind) and takes the fastest."),
      SYNCOPT_KEY(compute, memory_limit_gb, at_least(0), "",
                  "Memory one process may use, in GB (10^9 bytes); 0 takes it from the machine "
                  "(its memory or cgroup limit shared by the ranks on the node, ulimit -v, "
                  "ulimit -d). A model and batch that need more are refused (78) before "
                  "anything is allocated, naming the largest layer and the bytes."),
      // [exchange]
      SYNCOPT_KEY(exchange, pipeline, no_range(), "",
                  "Parameter-server modes: gradients and parameters travel in buckets of whole "
                  "layers; a worker sends each bucket's gradient as soon as backward has produced "
                  "it (top layer first) and starts each layer's forward as soon as its parameters "
                  "are in. Sync updates are the same (bit for bit with b = 0 or the virtual "
                  "clock); async and ssp apply each bucket on arrival and record its staleness. "
                  "false: pull all parameters, compute, push the whole gradient."),
      SYNCOPT_KEY(exchange, bucket_bytes, at_least(1), "",
                  "Smallest message of the pipeline: consecutive layers are grouped, from the top "
                  "layer down, until their parameters reach this many bytes (what is left at the "
                  "bottom of a shard's slice is one smaller bucket); 1: every layer its own "
                  "bucket. PyTorch DDP's bucket_cap and Horovod's fusion buffer play this part."),
      SYNCOPT_KEY(exchange, wire, no_range(), "",
                  "Parameter-server modes: the element type of gradients and parameters between "
                  "workers and shards. bf16 halves their bytes (rounded to nearest even on the "
                  "way out); the shard widens each gradient to FP32 before it accumulates and "
                  "applies it, and keeps theta, the optimiser state and the EMA in FP32. "
                  "Independent of compute.precision. summary.json reports the bytes moved per "
                  "update (exchange)."),
      // [sim] (syncopt simulate and plan; training ignores it)
      SYNCOPT_KEY(sim, workers, int_from(1), "",
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
                  "sim.compute_cv."),
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
                  "Bandwidth of every host's link, per direction, in Gbit/s, shared as "
                  "sim.link_sharing says; 0 = unlimited."),
      SYNCOPT_KEY(sim, shards_per_host, int_from(1), "",
                  "Shards on one host, sharing its link (the first hosts hold the shards); "
                  "messages between ranks of one host cross no link."),
      SYNCOPT_KEY(sim, workers_per_host, int_from(1), "",
                  "Workers on one host, sharing its link (the hosts after the shards')."),
      SYNCOPT_KEY(
          sim, link_sharing, no_range(), "",
          "How a link carries the messages that cross it at once: serial (one after "
          "another, first come first served) or fair (its bandwidth shared max-min fairly "
          "between the connections sending, as TCP does; each connection's messages in "
          "turn). fair is nearer real TCP links (docs/paper.md) but recomputes every rate "
          "at each message's start and end: 45 times slower with 212 workers and 17 shards."),
      SYNCOPT_KEY(sim, param_count, at_least(0), "",
                  "Model size in floats, which sets the message sizes; 0 = the parameter "
                  "count of model.name."),
      SYNCOPT_KEY(sim, seed, no_range(), "0 .. 2^63-1",
                  "Seed of the compute-time draws (stragglers keep stragglers.seed)."),
      SYNCOPT_KEY(sim, records, no_range(), "",
                  "Which step records syncopt simulate writes to steps.jsonl: shard0 (shard "
                  "0's, which summary.json and the report are made from; with S shards a real "
                  "run writes S times as many), all (every shard's, as a real run), none "
                  "(summary.json only). A record lists every gradient of its step: 1000 workers "
                  "x 10,000 steps is 1.4 GB per shard."),
  };
}

#undef SYNCOPT_KEY

}  // namespace

const std::vector<KeySpec>& key_specs() {
  static const std::vector<KeySpec> kSpecs = make_key_specs();
  return kSpecs;
}

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

std::vector<std::string_view> keys_of(std::string_view section) {
  std::vector<std::string_view> out;
  for (const auto& spec : key_specs()) {
    if (spec.section == section) out.push_back(spec.key);
  }
  return out;
}

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

}  // namespace syncopt::config::detail
