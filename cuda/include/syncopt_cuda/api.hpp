// The public face of the CUDA backend, for the factory and the tests: device
// discovery, the backend factory with an explicit device, and the NCCL
// allreduce. Needs no CUDA header (the NCCL communicator is behind a pimpl),
// so the factory in apps/syncopt/platform.cpp can include it inside the one
// `#if SYNCOPT_HAS_CUDA`.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>

#include "comm/reducer.hpp"
#include "nn/backend.hpp"

namespace syncopt::cuda {

// Number of CUDA devices this process can use: 0 when there is no driver,
// no GPU, or CUDA_VISIBLE_DEVICES hides them all. Never throws.
int device_count() noexcept;

// The node-local rank of this process as the launcher tells it
// (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID,
// PMI_LOCAL_RANK, MV2_COMM_WORLD_LOCAL_RANK); 0 when none is set. Not a
// collective, so a backend can be made on any subset of the ranks.
int local_rank_from_env() noexcept;

// The device of a rank: local_rank modulo device_count(). Throws
// ConfigError when there is no device.
int pick_device(int local_rank);

// The CUDA backend on `device` (threads is unused: the host side is one
// thread). The factory in apps/syncopt/platform.cpp calls this with
// pick_device(node-local rank). Throws ConfigError without a device.
std::unique_ptr<nn::Backend> make_cuda_backend(int threads, int device);

// An NCCL communicator over the ranks of an MPI communicator, one device per
// rank, bootstrapped by MPI (rank 0 makes the unique id, MPI_Bcast). The
// constructor and destructor are collectives of `comm`. A failing NCCL call
// aborts the communicator before it throws InternalError, so no rank is left
// waiting inside NCCL.
class NcclReducer {
 public:
  NcclReducer(MPI_Comm comm, int device);
  ~NcclReducer();
  NcclReducer(const NcclReducer&) = delete;
  NcclReducer& operator=(const NcclReducer&) = delete;

  // In-place sum over the ranks of `count` floats in device memory, enqueued
  // on `stream` (a cudaStream_t; nullptr = the reducer's own stream), not
  // waited for.
  void allreduce_sum(float* device_buf, std::size_t count, void* stream);
  // In-place mean over the ranks of `count` floats in host memory: copied in
  // through a pinned buffer, summed by NCCL, scaled by 1/size, copied back.
  // Returns when `host` holds the result.
  void allreduce_mean_host(float* host, std::size_t count);

  int rank() const;
  int size() const;
  int device() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> m_impl;
};

// NcclReducer behind the comm::Reducer interface (mean of a host buffer).
// A collective of `comm`, like the NcclReducer constructor.
std::unique_ptr<comm::Reducer> make_nccl_reducer(MPI_Comm comm, int device);

// Whether NCCL can serve `comm`: every rank sees a device and no node runs
// more ranks than it has devices (NCCL refuses two ranks on one GPU).
// Collective over `comm`; every rank gets the same answer. Throws nothing
// but MPI errors.
bool nccl_usable(MPI_Comm comm);

}  // namespace syncopt::cuda
