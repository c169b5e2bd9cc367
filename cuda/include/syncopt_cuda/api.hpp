// The public face of the CUDA backend, for the factory and the tests: device
// discovery, the backend factory with an explicit device, the network's
// device-pointer entry points, the device replica, and the NCCL allreduce.
// Needs no CUDA header (streams travel as void*, the NCCL communicator is
// behind a pimpl), so the factory in apps/syncopt/platform.cpp can include
// it inside the one `#if SYNCOPT_HAS_CUDA`.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "comm/reducer.hpp"
#include "nn/backend.hpp"
#include "nn/graph.hpp"
#include "replica/replica.hpp"

namespace syncopt::cuda {

// ---- devices ----------------------------------------------------------------

// What the CUDA runtime says about this process's devices.
struct DeviceProbe {
  enum class Status {
    kOk,     // count >= 1 devices
    kNone,   // no NVIDIA driver, or no device (cudaErrorNoDevice, CUDA_VISIBLE_DEVICES)
    kError,  // a driver that cannot serve this build (too old), or another failure
  };
  Status status = Status::kNone;
  int count = 0;
  std::string message;  // why, for kNone and kError; what to do next for kError
};

// Classifies cudaGetDeviceCount's result: `rc` its cudaError_t (as int),
// `error` its name and description, `driver_version` / `runtime_version`
// from cudaDriverGetVersion / cudaRuntimeGetVersion (0 driver: none is
// installed). Only a missing driver and cudaErrorNoDevice mean "no device";
// cudaErrorInsufficientDriver with a driver present is a driver too old for
// this build, an error. Pure, for tests.
DeviceProbe classify_probe(int rc, const std::string& error, int count, int driver_version,
                           int runtime_version);

// The probe of this process. Never throws.
DeviceProbe probe_devices() noexcept;

// Number of CUDA devices this process can use: 0 when there is no driver or
// no device (or CUDA_VISIBLE_DEVICES hides them all). Any other failure, such
// as a driver older than this build's runtime, is a ConfigError that says so
// with both versions: never reported as "no device".
int device_count();

// The node-local rank of this process as the launcher tells it
// (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID,
// PMI_LOCAL_RANK, MV2_COMM_WORLD_LOCAL_RANK); 0 when none is set. Not a
// collective, so a backend can be made on any subset of the ranks.
int local_rank_from_env() noexcept;

// The device of a rank: device 0 when the process sees one device (SLURM
// --gpus-per-task=1, or CUDA_VISIBLE_DEVICES set per task), else local_rank
// modulo device_count(), right when every rank of a node sees the same
// devices. ConfigError when there is none. Whether two ranks of a node ended
// up on one GPU is decided by comparing device UUIDs (nccl_plan).
int pick_device(int local_rank);

// The identity of one rank's GPU: host name, device UUID and PCI bus id
// (the same GPU has the same UUID whatever CUDA_VISIBLE_DEVICES numbers it).
struct RankDevice {
  int rank = 0;
  std::string host;
  bool has_device = false;
  std::string uuid;     // "GPU-xxxxxxxx-xxxx-..." as nvidia-smi prints it
  std::string pci;      // "0000:1b:00.0"
  std::string problem;  // why there is none
};

// Whether NCCL can serve the ranks of one node: every rank has a device and
// no two share one (NCCL refuses two ranks of a communicator on one GPU).
// "" when it can, else why not (naming the ranks and the GPU). Pure.
std::string nccl_node_problem(const std::vector<RankDevice>& node);

struct NcclPlan {
  bool usable = false;
  std::string reason;  // why not (the first rank's problem), for the log
};

// A collective over `comm`: every rank tells which GPU it uses (`device`,
// or -1 for none); the ranks of each node (MPI_Comm_split_type SHARED)
// compare UUIDs; every rank gets the same answer. Never counts devices
// against ranks: with one GPU per task every rank sees "device 0", and they
// are still distinct GPUs. Throws nothing but MPI errors.
NcclPlan nccl_plan(MPI_Comm comm, int device);
inline bool nccl_usable(MPI_Comm comm, int device) { return nccl_plan(comm, device).usable; }

// ---- the backend -------------------------------------------------------------

struct CudaOptions {
  // cuDNN convolution algorithms: false times them (cudnnFind) and takes the
  // fastest, preferring a deterministic one within 20%; true takes the
  // heuristics' first deterministic one without timing, so that two runs
  // (two processes) compute bit-identical results.
  bool deterministic = false;
  // compute.precision: bf16 tensors with FP32 compute through cuDNN and
  // cuBLAS (tensor cores); FP32 otherwise, strict unless tf32.
  nn::Precision precision = nn::Precision::kFp32;
  bool tf32 = false;
  // Bound on every host wait for the GPU (cluster.dead_after_s); <= 0: none.
  double sync_timeout_s = 60.0;
};

// The CUDA backend on `device` (threads is unused: the host side is one
// thread). The factory in apps/syncopt/platform.cpp calls this with
// pick_device(node-local rank). Throws ConfigError without a device.
std::unique_ptr<nn::Backend> make_cuda_backend(int threads, int device,
                                               const CudaOptions& options = {});

// What a network of the CUDA backend offers beyond nn::Network: training on
// parameters and a gradient that stay in device memory (the CudaReplica),
// next to the host-pointer entry points that every backend has (the
// parameter-server workers, evaluation).
class DeviceNetwork : public nn::Network {
 public:
  virtual int device() const = 0;
  // The stream all of the network's compute runs on (a cudaStream_t).
  virtual void* stream() const = 0;
  virtual double sync_timeout_s() const = 0;
  // d_params, d_grad [layout.count] in device memory of device(); images
  // [batch, C, H, W] and labels [batch] on the host. Enqueued on stream()
  // after the work already there; returns the mean loss, once d_grad holds
  // the gradient (overwritten). grad_finite non-null: also whether every
  // element of d_grad is finite, found on the device and read back with the
  // loss (the step's one host wait).
  virtual float train_step_device(const float* d_params, const float* images,
                                  const std::int32_t* labels, int batch, float* d_grad,
                                  bool* grad_finite) = 0;
  // train_step that also writes dL/dimages [batch, C, H, W] (host) into
  // input_grad, as nn::cpu::CpuNetwork's: for the tests that compare a
  // layer's input gradient with the CPU backend's.
  virtual float train_step_with_input_grad(const float* params, const float* images,
                                           const std::int32_t* labels, int batch, float* grad,
                                           float* input_grad) = 0;
  // Dropout keys, as nn::cpu::CpuNetwork::set_dropout_key: by default a hash
  // of the batch (nn/dropout.hpp), or a fixed key (the tests).
  virtual void set_dropout_key(std::optional<std::uint64_t> key) = 0;
};

// A network of the CUDA backend for any layer graph (the backend's
// make_network builds the graph of a ModelSpec and calls this), as
// nn::cpu::CpuNetwork(graph, ...) is the CPU backend's. Throws ConfigError
// for max_batch < 1.
std::unique_ptr<DeviceNetwork> make_cuda_network(const nn::Graph& graph, int max_batch, int device,
                                                 const CudaOptions& options = {});

// The device replica of a rank that trains the whole model (local and
// allreduce modes): θ, the gradient, the optimiser state and the EMA live in
// device memory; compute_gradient() uses the network's device entry point,
// reduce_gradient() averages in place through a DeviceReducer (NCCL) or,
// with any other reducer, copies out and back; gradient_finite() answers
// from a flag computed on the device after the last change of the gradient
// and read back by the wait that change needed anyway (the loss read-back of
// compute_gradient, the reduction's wait), so a local step waits on the host
// once and an NCCL allreduce step twice; copy_theta / copy_ema / state()
// copy to the host, restore() uploads. The optimiser and EMA kernels compute optim/'s
// formulas in the same operation order, without contraction into FMAs, so
// they equal the host replica's bit for bit for the same gradient. A
// network that is not a DeviceNetwork gets the host replica.
std::unique_ptr<replica::Replica> make_cuda_replica(nn::Network& net, const float* init,
                                                    std::size_t count,
                                                    const replica::ReplicaOptions& options);

// ---- NCCL ----------------------------------------------------------------------

// A reducer that can also average a buffer in device memory in place.
class DeviceReducer : public comm::Reducer {
 public:
  virtual int device() const = 0;
  // d_buf [count] on device() becomes the mean over the ranks. Enqueued on
  // `stream` (a cudaStream_t) after the work already there, and waited for
  // (bounded by the reducer's deadline). `then`, if set, is called after the
  // reduction is enqueued and before the wait, to enqueue more work on
  // `stream` that the same wait covers. A collective.
  virtual void mean_device(float* d_buf, std::size_t count, void* stream,
                           const std::function<void()>& then) = 0;
  // The same, the sum over the ranks (micro-batches' gradient sums).
  virtual void sum_device(float* d_buf, std::size_t count, void* stream,
                          const std::function<void()>& then) = 0;
};

// An NCCL communicator over the ranks of an MPI communicator, one device per
// rank, bootstrapped by MPI (rank 0 makes the unique id, MPI_Bcast), created
// non-blocking (ncclCommInitRankConfig, config.blocking = 0). Every NCCL
// call and every wait for its work polls ncclCommGetAsyncError and the
// stream against a deadline (`timeout_s`, cluster.dead_after_s); past it, or
// on an asynchronous NCCL error, the communicator is aborted
// (ncclCommAbort) and an InternalError names this rank and host and the
// rank(s) that never reached the operation (the waiting ranks tell each
// other over MPI after the deadline). The constructor and destructor are
// collectives of `comm`; the destructor never blocks past the deadline.
class NcclReducer {
 public:
  NcclReducer(MPI_Comm comm, int device, double timeout_s);
  ~NcclReducer();
  NcclReducer(const NcclReducer&) = delete;
  NcclReducer& operator=(const NcclReducer&) = delete;

  // In-place sum over the ranks of `count` floats in device memory, enqueued
  // on `stream` (a cudaStream_t; nullptr = the reducer's own stream) and
  // waited for.
  // `then`, if set, enqueues more work on the stream after the sum, before
  // the one wait that covers it all.
  void allreduce_sum(float* device_buf, std::size_t count, void* stream,
                     const std::function<void()>& then = {});
  // In-place mean, the same way (sum, then a scale by 1/size: the MPI
  // reducer's formula). `then`, if set, enqueues more work on the stream
  // after the scale, before the one wait that covers it all.
  void allreduce_mean(float* device_buf, std::size_t count, void* stream,
                      const std::function<void()>& then = {});
  // In-place mean over the ranks of `count` floats in host memory: copied in
  // through a pinned buffer, averaged, copied back. Returns when `host`
  // holds the result.
  void allreduce_mean_host(float* host, std::size_t count);
  // The same, the sum.
  void allreduce_sum_host(float* host, std::size_t count);

  int rank() const;
  int size() const;
  int device() const;
  double timeout_s() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

// NcclReducer behind the comm::Reducer interface (mean of a host buffer)
// and DeviceReducer's (mean of a device buffer). A collective of `comm`.
std::unique_ptr<DeviceReducer> make_nccl_reducer(MPI_Comm comm, int device, double timeout_s);

}  // namespace syncopt::cuda
