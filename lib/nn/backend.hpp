// The compute interface: models as flat parameter buffers with per-layer
// views, and a Backend that builds an executable Network for a model and a
// batch size. CpuBackend (oneDNN) is the reference and the test oracle; a
// CUDA backend lives in cuda/ and is picked by make_backend().
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace syncopt::nn {

struct ModelSpec {
  std::string name = "cnn";  // cnn | mlp | logreg
  int channels = 1, height = 28, width = 28;
  int classes = 10;
  bool weight_norm = true;
  int mlp_hidden = 128;
};

// One named parameter tensor inside the flat buffer.
struct ParamView {
  std::string name;                 // e.g. "conv1.v", "conv1.g", "conv1.b", "fc2.w"
  std::size_t offset = 0;           // in floats
  std::size_t count = 0;            // in floats
  std::vector<std::int64_t> shape;  // e.g. {32, 1, 3, 3} (OIHW), {256, 3136} (out, in)
};

struct ParamLayout {
  std::vector<ParamView> views;
  std::size_t count = 0;  // total floats
  const ParamView& find(const std::string& name) const;  // throws InternalError if absent
};

// The deterministic parameter layout of a model (same on every rank/backend).
ParamLayout param_layout(const ModelSpec& spec);

// Seeded initialisation of all parameters (He-style for weights, g = ||v||
// per output unit for weight norm so that the initial effective weights equal
// v, zero biases). Same values on every rank and backend for the same seed.
void init_params(const ModelSpec& spec, const ParamLayout& layout, float* params,
                 std::uint64_t seed);

// Human-readable, multi-line summary of a model: one line per layer with its
// output shape and parameter count, then the total (for logs / --dry-run).
std::string model_summary(const ModelSpec& spec);

class Network {
 public:
  virtual ~Network() = default;
  // images [batch, C, H, W] float32, labels [batch] int32 in [0, classes),
  // params and grad [layout.count]. Returns the mean softmax cross-entropy
  // over the batch and writes its gradient w.r.t. params into grad
  // (overwritten, not accumulated). batch <= max_batch().
  virtual float train_step(const float* params, const float* images, const std::int32_t* labels,
                           int batch, float* grad) = 0;
  // Forward only: logits [batch, classes]. batch <= max_batch().
  virtual void predict(const float* params, const float* images, int batch, float* logits) = 0;
  virtual int max_batch() const = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual std::unique_ptr<Network> make_network(const ModelSpec& spec, int max_batch) = 0;
};

// The one factory: "cpu" always; "cuda" when built with CUDA (otherwise a
// ConfigError saying how to build with it). `threads` = compute threads;
// `local_rank` = this rank's index among the ranks of its node (from
// MPI_Comm_split_type), which picks the GPU: local_rank % devices.
std::unique_ptr<Backend> make_backend(const std::string& name, int threads, int local_rank = 0);

// Where a rank with this node-local rank computes, for --dry-run: "cpu", or
// "cuda:K of N (<name>)", or why CUDA is not available. Never throws.
std::string describe_device(const std::string& name, int local_rank);

// The mean of a host buffer over the ranks of `comm` on the devices (NCCL)
// when backend is "cuda" and every rank has its own GPU; null otherwise (the
// caller then uses MPI_Allreduce). A collective over `comm`.
class DeviceAllreduce {
 public:
  virtual ~DeviceAllreduce() = default;
  virtual void mean(float* host, std::size_t count) = 0;
};
std::unique_ptr<DeviceAllreduce> make_device_allreduce(const std::string& name, MPI_Comm comm);


}  // namespace syncopt::nn
