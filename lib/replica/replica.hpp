// A training replica: θ, its gradient, the optimiser state and the EMA θ̄ of
// a rank that trains the whole model (local and allreduce modes), wherever
// they live: host memory for the CPU backend (here), device memory for CUDA
// (cuda/). The local and allreduce loops speak only to this interface, so
// a GPU replica keeps everything on the device and copies to the host only
// for records, evaluation at its interval, and checkpoints.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "checkpoint/state.hpp"
#include "comm/reducer.hpp"
#include "common/error.hpp"
#include "nn/backend.hpp"
#include "optim/optimizer.hpp"

namespace syncopt::replica {

struct ReplicaOptions {
  optim::OptimizerOptions optim;
  double ema_decay = 0.0;  // 0: no EMA (θ̄ is θ)
};

class Replica {
 public:
  virtual ~Replica() = default;
  virtual std::size_t count() const = 0;
  // Forward and backward of one mini-batch (host images [batch, C, H, W],
  // labels [batch]) at θ; the gradient stays in the replica. Returns the
  // mean loss.
  virtual float compute_gradient(const float* images, const std::int32_t* labels, int batch) = 0;
  // The same at other parameters: `theta` [count()] is a host vector (an
  // older θ kept by replica/staleness.hpp's ParamHistory for simulated
  // staleness); the gradient stays in the replica, θ is not touched. A
  // backend without it says so (the host replica has it).
  virtual float compute_gradient_at(const float* theta, const float* images,
                                    const std::int32_t* labels, int batch) {
    (void)theta, (void)images, (void)labels, (void)batch;
    throw ConfigError(
        "train.simulated_staleness is not on this backend (its replica has no "
        "compute_gradient_at); use compute.backend = \"cpu\"");
  }
  // The gradient becomes its mean over the ranks of `reducer` (a collective).
  virtual void reduce_gradient(comm::Reducer& reducer) = 0;
  // Micro-batches (train.micro_batch, docs/design.md §3): the gradient of
  // `batch` examples at θ added, weighted by `batch`, into the step's sum of
  // per-example gradients (`first`: the sum starts from it). Returns the
  // micro-batch's mean loss.
  virtual float accumulate_gradient(const float* images, const std::int32_t* labels, int batch,
                                    bool first) = 0;
  // The step's sum and its `examples` summed over the ranks of `reducer`
  // in one collective (the count as one more float: exact below 2^24); the
  // gradient becomes the sum times 1 / (the examples of every rank), which
  // this returns.
  virtual double reduce_gradient_sum(comm::Reducer& reducer, double examples) = 0;
  // Whether every element of the gradient is finite (divergence check,
  // before anything is applied).
  virtual bool gradient_finite() const = 0;
  // θ <- optimiser(θ, gradient, lr); then θ̄ folds θ in (if on).
  virtual void apply(float lr) = 0;
  // Host copies of θ and θ̄ [count] (θ̄ = θ without an EMA).
  virtual void copy_theta(float* out) const = 0;
  virtual void copy_ema(float* out) const = 0;
  // θ, the optimiser and the EMA, for checkpoints; restore() needs a state of
  // a replica with the same count and options (else ConfigError / DataError).
  virtual checkpoint::State state() const = 0;
  virtual void restore(const checkpoint::State& s) = 0;
};

// The host replica over a network of any backend that takes host pointers:
// θ and the gradient are host vectors, the optimiser and EMA are optim/'s.
// `net` must outlive the replica; `init` [count] is θ at step 0.
std::unique_ptr<Replica> make_host_replica(nn::Network& net, const float* init, std::size_t count,
                                           const ReplicaOptions& opt);

}  // namespace syncopt::replica
