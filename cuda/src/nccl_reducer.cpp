// NcclReducer: an NCCL communicator over the ranks of an MPI communicator
// (bootstrapped by MPI), for the allreduce mode with the CUDA backend; and
// nccl_usable(), the collective check whether NCCL can serve a communicator.
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <cstring>
#include <exception>
#include <string>

#include "comm/mpi.hpp"
#include "common/error.hpp"
#include "syncopt_cuda/api.hpp"
#include "syncopt_cuda/check.hpp"
#include "syncopt_cuda/kernels.hpp"
#include "syncopt_cuda/memory.hpp"

namespace syncopt::cuda {

struct NcclReducer::Impl {
  MPI_Comm comm = MPI_COMM_NULL;  // our own duplicate: the bootstrap uses it alone
  int rank = 0, size = 1, device = 0;
  ncclComm_t nccl = nullptr;
  CudaStream stream;  // created on `device` (the constructor sets it first)
  DeviceBuffer<float> d_buf;
  PinnedBuffer<float> h_buf;

  explicit Impl(int dev) : device(dev) {}
  ~Impl() {
    (void)cudaSetDevice(device);
    if (nccl != nullptr) {
      // While an exception unwinds, a peer may be gone: abort (local and
      // non-blocking) instead of a destroy that could wait for it.
      if (std::uncaught_exceptions() > 0) {
        (void)ncclCommAbort(nccl);
      } else {
        (void)cudaStreamSynchronize(stream.get());
        (void)ncclCommDestroy(nccl);
      }
    }
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (comm != MPI_COMM_NULL && finalized == 0) MPI_Comm_free(&comm);
  }

  void reserve(std::size_t count) {
    if (count <= d_buf.count()) return;
    stream.synchronize();
    d_buf = DeviceBuffer<float>(count);
    h_buf = PinnedBuffer<float>(count);
  }
};

namespace {

int set_device(int device) {
  SYNCOPT_CHECK_CUDA(cudaSetDevice(device));
  return device;
}

}  // namespace

NcclReducer::NcclReducer(MPI_Comm comm, int device)
    : m_impl(std::make_unique<Impl>(set_device(device))) {
  Impl& im = *m_impl;
  SYNCOPT_CHECK_MPI(MPI_Comm_dup(comm, &im.comm));
  SYNCOPT_CHECK_MPI(MPI_Comm_rank(im.comm, &im.rank));
  SYNCOPT_CHECK_MPI(MPI_Comm_size(im.comm, &im.size));
  // Rank 0 makes the id and sends it with its result, so that a failure
  // there fails every rank instead of leaving them waiting in the bootstrap.
  struct {
    int rc;
    ncclUniqueId id;
  } boot{};
  if (im.rank == 0) boot.rc = static_cast<int>(ncclGetUniqueId(&boot.id));
  SYNCOPT_CHECK_MPI(MPI_Bcast(&boot, sizeof(boot), MPI_BYTE, 0, im.comm));
  if (boot.rc != ncclSuccess) {
    detail::throw_error("NCCL", ncclGetErrorString(static_cast<ncclResult_t>(boot.rc)),
                        "ncclGetUniqueId (on rank 0)", __FILE__, __LINE__);
  }
  SYNCOPT_CHECK_NCCL(ncclCommInitRank(&im.nccl, im.size, boot.id, im.rank), im.nccl);
}

NcclReducer::~NcclReducer() = default;

int NcclReducer::rank() const { return m_impl->rank; }
int NcclReducer::size() const { return m_impl->size; }
int NcclReducer::device() const { return m_impl->device; }

void NcclReducer::allreduce_sum(float* device_buf, std::size_t count, void* stream) {
  Impl& im = *m_impl;
  if (im.nccl == nullptr) throw InternalError("NcclReducer used after an NCCL failure aborted it");
  SYNCOPT_CHECK_CUDA(cudaSetDevice(im.device));
  const cudaStream_t s = stream != nullptr ? static_cast<cudaStream_t>(stream) : im.stream.get();
  SYNCOPT_CHECK_NCCL(ncclAllReduce(device_buf, device_buf, count, ncclFloat, ncclSum, im.nccl, s),
                     im.nccl);
}

void NcclReducer::allreduce_mean_host(float* host, std::size_t count) {
  Impl& im = *m_impl;
  if (count == 0) return;
  SYNCOPT_CHECK_CUDA(cudaSetDevice(im.device));
  im.reserve(count);
  const cudaStream_t s = im.stream.get();
  const std::size_t nbytes = count * sizeof(float);
  std::memcpy(im.h_buf.get(), host, nbytes);
  SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(im.d_buf.get(), im.h_buf.get(), nbytes,
                                     cudaMemcpyHostToDevice, s));
  allreduce_sum(im.d_buf.get(), count, s);
  scale(im.d_buf.get(), count, 1.0f / static_cast<float>(im.size), s);
  SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(im.h_buf.get(), im.d_buf.get(), nbytes,
                                     cudaMemcpyDeviceToHost, s));
  im.stream.synchronize();
  std::memcpy(host, im.h_buf.get(), nbytes);
}

std::unique_ptr<comm::Reducer> make_nccl_reducer(MPI_Comm comm, int device) {
  class Nccl final : public comm::Reducer {
   public:
    Nccl(MPI_Comm c, int dev) : m_reducer(c, dev) {}
    std::string name() const override { return "nccl"; }
    void mean(float* buf, std::size_t count) override { m_reducer.allreduce_mean_host(buf, count); }

   private:
    NcclReducer m_reducer;
  };
  return std::make_unique<Nccl>(comm, device);
}

bool nccl_usable(MPI_Comm comm) {
  const int local_size = comm::Communicator(comm, comm::Communicator::kNodeLocal).size();
  const int devices = device_count();
  int ok = devices > 0 && local_size <= devices ? 1 : 0;
  SYNCOPT_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm));
  return ok == 1;
}

}  // namespace syncopt::cuda
