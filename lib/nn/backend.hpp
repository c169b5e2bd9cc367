// The compute interface: a Backend builds an executable Network for a model
// (nn/model.hpp, run as its graph, nn/graph.hpp) and a batch size. CpuBackend (oneDNN) is the
// reference and the test oracle; the CUDA backend lives in cuda/. No MPI here: compute knows
// nothing of ranks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nn/model.hpp"

namespace syncopt::nn {

class Network {
 public:
  virtual ~Network() = default;
  // images [batch, C, H, W] float32, labels [batch] int32 in [0, classes),
  // params and grad [layout.count]. Returns the mean softmax cross-entropy
  // over the batch and writes its gradient w.r.t. params into grad
  // (overwritten, not accumulated). batch <= max_batch().
  virtual float train_step(const float* params, const float* images, const std::int32_t* labels,
                           int batch, float* grad) = 0;
  // Forward only, in inference mode: logits [batch, classes]. batch <=
  // max_batch(). A model with batch norm normalises with the statistics of
  // the last set_batch_norm_statistics() (InternalError before any).
  virtual void predict(const float* params, const float* images, int batch, float* logits) = 0;
  virtual int max_batch() const = 0;
  // Batch norm: train_step normalises with each batch's own statistics;
  // predict needs population statistics that belong to the parameters it
  // is given. This sets them to those of `params` over `batches` batches of
  // `batch` examples at `images` ([batches * batch, C, H, W], forward in
  // training mode; per channel the mean and the biased variance of all the
  // examples, accumulated in double). A no-op for a model without batch norm.
  virtual bool has_batch_norm() const { return false; }
  virtual void set_batch_norm_statistics(const float* params, const float* images, int batch,
                                         int batches) {}
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual std::unique_ptr<Network> make_network(const ModelSpec& spec, int max_batch) = 0;
};

// The CPU backend (oneDNN), the reference and the test oracle. `threads`:
// OpenMP threads of the compute (0 = the OpenMP default); ConfigError if < 0.
// Other backends (CUDA, in cuda/) are chosen by the one factory in
// apps/syncopt/platform.cpp.
std::unique_ptr<Backend> make_cpu_backend(int threads);

}  // namespace syncopt::nn
