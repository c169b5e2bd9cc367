// NcclReducer: a non-blocking NCCL communicator over the ranks of an MPI
// communicator (bootstrapped by MPI), for the allreduce mode with the CUDA
// backend, with a deadline on everything it waits for (see api.hpp).
//
// Why non-blocking: a blocking NCCL call, or a cudaStreamSynchronize behind
// an NCCL kernel, never returns when a peer is gone; the kernel spins on the
// GPU for ever. Here every call that may return ncclInProgress is settled by
// polling ncclCommGetAsyncError, and every wait for an NCCL kernel polls the
// stream and the communicator's asynchronous error, against the deadline
// (cluster.dead_after_s). Past it: ncclCommAbort (which also stops the
// kernel), then a roll call over MPI — each waiting rank tells every other
// which operation it is stuck in and listens for a grace period — so that
// the error names the ranks that never reached the operation.
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "comm/mpi.hpp"
#include "common/error.hpp"
#include "syncopt_cuda/api.hpp"
#include "syncopt_cuda/check.hpp"
#include "syncopt_cuda/kernels.hpp"
#include "syncopt_cuda/memory.hpp"
#include "syncopt_cuda/sync.hpp"

// The result of a call on the non-blocking communicator of `impl`:
// ncclInProgress is settled by polling against the deadline; any error
// aborts the communicator, then throws. `what` names the operation.
#define SYNCOPT_CHECK_NCCL_ASYNC(impl, call, what) \
  (impl).settle((call), #call, (what), __FILE__, __LINE__)

namespace syncopt::cuda {

namespace {

constexpr int kRollCallTag = 9101;

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

}  // namespace

struct NcclReducer::Impl {
  MPI_Comm comm = MPI_COMM_NULL;  // our own duplicate: the bootstrap and the roll call use it
  int rank = 0, size = 1, device = 0;
  double timeout_s = 60.0;
  std::vector<std::string> hosts;  // of every rank
  ncclComm_t nccl = nullptr;
  CudaStream stream;  // created on `device` (the constructor sets it first)
  DeviceBuffer<float> d_buf;
  PinnedBuffer<float> h_buf;
  std::uint64_t ops = 0;  // collectives started; 0 while initialising

  Impl(int dev, double timeout) : device(dev), timeout_s(timeout) {}

  ~Impl() {
    (void)cudaSetDevice(device);
    if (nccl != nullptr) {
      try {
        if (std::uncaught_exceptions() > 0 || !finalize()) abort_nccl();
      } catch (...) {  // a destructor never throws
        abort_nccl();
      }
    }
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (comm != MPI_COMM_NULL && finalized == 0) MPI_Comm_free(&comm);
  }

  // Flushes and destroys the communicator within the deadline; false if it
  // could not (the caller aborts).
  bool finalize() {
    Poller poll_stream(timeout_s);
    for (cudaError_t q; (q = cudaStreamQuery(stream.get())) != cudaSuccess;) {
      if (q != cudaErrorNotReady || poll_stream.expired()) return false;
      poll_stream.pause();
    }
    ncclResult_t rc = ncclCommFinalize(nccl);
    if (rc != ncclSuccess && rc != ncclInProgress) return false;
    Poller poll(timeout_s);
    ncclResult_t state = ncclInProgress;
    while (ncclCommGetAsyncError(nccl, &state) == ncclSuccess && state == ncclInProgress) {
      if (poll.expired()) return false;
      poll.pause();
    }
    if (state != ncclSuccess) return false;
    rc = ncclCommDestroy(nccl);
    nccl = nullptr;
    return rc == ncclSuccess || rc == ncclInProgress;
  }

  void abort_nccl() noexcept {
    if (nccl != nullptr) (void)ncclCommAbort(nccl);
    nccl = nullptr;
  }

  std::string who(int r) const {
    return "rank " + std::to_string(r) + " (host " +
           (r >= 0 && r < static_cast<int>(hosts.size()) ? hosts[static_cast<std::size_t>(r)]
                                                         : std::string("?")) +
           ")";
  }

  // Ranks of the communicator that did not answer the roll call for the
  // current operation within a grace period: every rank that gives up on
  // the operation sends its number to every other, and listens.
  std::vector<int> roll_call() {
    std::vector<char> reached(static_cast<std::size_t>(size), 0);
    reached[static_cast<std::size_t>(rank)] = 1;
    std::uint64_t mine = ops;
    std::vector<MPI_Request> sends;
    for (int p = 0; p < size; ++p) {
      if (p == rank) continue;
      MPI_Request r = MPI_REQUEST_NULL;
      if (MPI_Isend(&mine, 1, MPI_UINT64_T, p, kRollCallTag, comm, &r) == MPI_SUCCESS) {
        sends.push_back(r);
      }
    }
    // Long enough for the others to reach their own deadline: they started
    // waiting when they entered the operation, a straggler's delay later.
    Poller grace(std::clamp(timeout_s / 4.0, 1.0, 15.0));
    int heard = 0;
    while (heard < size - 1 && !grace.expired()) {
      int flag = 0;
      MPI_Status st;
      if (MPI_Iprobe(MPI_ANY_SOURCE, kRollCallTag, comm, &flag, &st) != MPI_SUCCESS) break;
      if (flag == 0) {
        grace.pause();
        continue;
      }
      std::uint64_t theirs = 0;
      MPI_Recv(&theirs, 1, MPI_UINT64_T, st.MPI_SOURCE, kRollCallTag, comm, MPI_STATUS_IGNORE);
      auto& r = reached[static_cast<std::size_t>(st.MPI_SOURCE)];
      if (theirs == ops && r == 0) {
        r = 1;
        ++heard;
      }
    }
    for (MPI_Request& r : sends) {
      int done = 0;
      MPI_Test(&r, &done, MPI_STATUS_IGNORE);
      if (done == 0) MPI_Request_free(&r);  // tiny, eager: it completes on its own
    }
    std::vector<int> missing;
    for (int p = 0; p < size; ++p) {
      if (reached[static_cast<std::size_t>(p)] == 0) missing.push_back(p);
    }
    return missing;
  }

  // Aborts, asks who is missing, throws. `what` the operation, `why` what
  // went wrong with it.
  [[noreturn]] void fail(const std::string& what, const std::string& why) {
    const std::string nccl_says =
        nccl != nullptr ? std::string(ncclGetLastError(nccl)) : std::string();
    abort_nccl();
    const std::vector<int> missing = size > 1 ? roll_call() : std::vector<int>{};
    std::string msg = "NCCL " + what + " on " + who(rank) + ", GPU " + std::to_string(device) +
                      ": " + why + ". The NCCL communicator was aborted. ";
    if (size == 1) {
      msg += "This is a one-rank communicator: no peer is involved.";
    } else if (!missing.empty()) {
      msg += "Never reached it: ";
      for (std::size_t i = 0; i < missing.size(); ++i) {
        msg += (i > 0 ? ", " : "") + who(missing[i]);
      }
      msg +=
          " (dead, hung, or slower than the deadline; see their logs, or raise "
          "cluster.dead_after_s if they are only slow).";
    } else {
      msg +=
          "Every rank reached it, so NCCL or a GPU stalled or failed (a peer's abort, the "
          "network between nodes).";
    }
    if (!nccl_says.empty()) msg += " NCCL's last error: " + nccl_says;
    throw InternalError(msg);
  }

  void settle(ncclResult_t rc, const char* stmt, const std::string& what, const char* file,
              int line) {
    const std::string where =
        std::string(" (") + stmt + ", " + file + ":" + std::to_string(line) + ")";
    if (rc != ncclSuccess && rc != ncclInProgress) {
      fail(what, std::string("the call failed: ") + ncclGetErrorString(rc) + where);
    }
    if (rc == ncclSuccess || nccl == nullptr) return;
    Poller poll(timeout_s);
    for (;;) {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t q = ncclCommGetAsyncError(nccl, &state);
      if (q != ncclSuccess)
        fail(what, std::string("ncclCommGetAsyncError failed: ") + ncclGetErrorString(q) + where);
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) {
        fail(what, std::string("it failed: ") + ncclGetErrorString(state) + where);
      }
      if (poll.expired()) {
        fail(what, "it did not complete within cluster.dead_after_s = " + seconds(timeout_s) +
                       " s" + where);
      }
      poll.pause();
    }
  }

  // Waits for the work on `s` (an NCCL kernel among it), watching the
  // communicator's asynchronous error and the deadline.
  void wait_done(cudaStream_t s, const std::string& what) {
    note_host_wait();
    Poller poll(timeout_s);
    for (;;) {
      const cudaError_t q = cudaStreamQuery(s);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) {
        (void)cudaGetLastError();
        fail(what, std::string("the CUDA stream failed: ") + cudaGetErrorString(q));
      }
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(nccl, &state) != ncclSuccess ||
          (state != ncclSuccess && state != ncclInProgress)) {
        fail(what,
             std::string("NCCL reported an asynchronous error: ") + ncclGetErrorString(state));
      }
      if (poll.expired()) {
        fail(what,
             "it did not complete within cluster.dead_after_s = " + seconds(timeout_s) + " s");
      }
      poll.pause();
    }
  }

  void reserve(std::size_t count) {
    if (count <= d_buf.count()) return;
    wait_stream(stream.get(), timeout_s, "the NCCL staging buffer's resize");
    d_buf = DeviceBuffer<float>(count);
    h_buf = PinnedBuffer<float>(count);
  }

  // sum, or mean = sum then a scale by 1/size (comm::make_mpi_reducer's
  // formula), in place on `s`; enqueued, not waited for. Returns the
  // operation's name for the wait.
  std::string enqueue(float* d, std::size_t count, cudaStream_t s, bool mean) {
    if (nccl == nullptr) {
      throw InternalError("NcclReducer used after an NCCL failure aborted it (" + who(rank) + ")");
    }
    ++ops;
    const std::string what =
        "allreduce #" + std::to_string(ops) + " of " + std::to_string(count) + " floats";
    SYNCOPT_CHECK_NCCL_ASYNC(*this, ncclAllReduce(d, d, count, ncclFloat, ncclSum, nccl, s), what);
    if (mean) scale(d, count, 1.0f / static_cast<float>(size), s);
    return what;
  }

  // In place over host memory through the pinned and device buffers: the
  // sum, or the mean.
  void reduce_host(float* host, std::size_t count, bool mean);
};

namespace {

int set_device(int device) {
  SYNCOPT_CHECK_CUDA(cudaSetDevice(device));
  return device;
}

}  // namespace

NcclReducer::NcclReducer(MPI_Comm comm, int device, double timeout_s)
    : m_impl(std::make_unique<Impl>(set_device(device), timeout_s)) {
  Impl& im = *m_impl;
  SYNCOPT_CHECK_MPI(MPI_Comm_dup(comm, &im.comm));
  SYNCOPT_CHECK_MPI(MPI_Comm_rank(im.comm, &im.rank));
  SYNCOPT_CHECK_MPI(MPI_Comm_size(im.comm, &im.size));
  // Host names for the error messages.
  std::array<char, 64> host{};
  if (gethostname(host.data(), host.size() - 1) != 0) host[0] = '?';
  std::vector<char> hosts(host.size() * static_cast<std::size_t>(im.size));
  SYNCOPT_CHECK_MPI(MPI_Allgather(host.data(), static_cast<int>(host.size()), MPI_CHAR,
                                  hosts.data(), static_cast<int>(host.size()), MPI_CHAR, im.comm));
  for (int r = 0; r < im.size; ++r) im.hosts.emplace_back(hosts.data() + host.size() * r);
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
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  SYNCOPT_CHECK_NCCL_ASYNC(im, ncclCommInitRankConfig(&im.nccl, im.size, boot.id, im.rank, &config),
                           "communicator initialisation of " + std::to_string(im.size) + " ranks");
}

NcclReducer::~NcclReducer() = default;

int NcclReducer::rank() const { return m_impl->rank; }
int NcclReducer::size() const { return m_impl->size; }
int NcclReducer::device() const { return m_impl->device; }
double NcclReducer::timeout_s() const { return m_impl->timeout_s; }

void NcclReducer::allreduce_sum(float* device_buf, std::size_t count, void* stream,
                                const std::function<void()>& then) {
  Impl& im = *m_impl;
  if (count == 0) return;  // every rank passes the same count
  SYNCOPT_CHECK_CUDA(cudaSetDevice(im.device));
  const cudaStream_t s = stream != nullptr ? static_cast<cudaStream_t>(stream) : im.stream.get();
  const std::string what = im.enqueue(device_buf, count, s, false);
  if (then) then();
  im.wait_done(s, what);
}

void NcclReducer::allreduce_mean(float* device_buf, std::size_t count, void* stream,
                                 const std::function<void()>& then) {
  Impl& im = *m_impl;
  if (count == 0) return;  // every rank passes the same count
  SYNCOPT_CHECK_CUDA(cudaSetDevice(im.device));
  const cudaStream_t s = stream != nullptr ? static_cast<cudaStream_t>(stream) : im.stream.get();
  const std::string what = im.enqueue(device_buf, count, s, true);
  if (then) then();
  im.wait_done(s, what);
}

void NcclReducer::allreduce_mean_host(float* host, std::size_t count) {
  m_impl->reduce_host(host, count, true);
}

void NcclReducer::allreduce_sum_host(float* host, std::size_t count) {
  m_impl->reduce_host(host, count, false);
}

void NcclReducer::Impl::reduce_host(float* host, std::size_t count, bool mean) {
  Impl& im = *this;
  if (count == 0) return;  // every rank passes the same count
  SYNCOPT_CHECK_CUDA(cudaSetDevice(im.device));
  im.reserve(count);
  const cudaStream_t s = im.stream.get();
  const std::size_t nbytes = count * sizeof(float);
  std::memcpy(im.h_buf.get(), host, nbytes);
  SYNCOPT_CHECK_CUDA(
      cudaMemcpyAsync(im.d_buf.get(), im.h_buf.get(), nbytes, cudaMemcpyHostToDevice, s));
  const std::string what = im.enqueue(im.d_buf.get(), count, s, mean);
  SYNCOPT_CHECK_CUDA(
      cudaMemcpyAsync(im.h_buf.get(), im.d_buf.get(), nbytes, cudaMemcpyDeviceToHost, s));
  im.wait_done(s, what);
  std::memcpy(host, im.h_buf.get(), nbytes);
}

std::unique_ptr<DeviceReducer> make_nccl_reducer(MPI_Comm comm, int device, double timeout_s) {
  class Nccl final : public DeviceReducer {
   public:
    Nccl(MPI_Comm c, int dev, double timeout) : m_reducer(c, dev, timeout) {}
    std::string name() const override { return "nccl"; }
    void mean(float* buf, std::size_t count) override { m_reducer.allreduce_mean_host(buf, count); }
    void sum(float* buf, std::size_t count) override { m_reducer.allreduce_sum_host(buf, count); }
    int device() const override { return m_reducer.device(); }
    void mean_device(float* d_buf, std::size_t count, void* stream,
                     const std::function<void()>& then) override {
      m_reducer.allreduce_mean(d_buf, count, stream, then);
    }
    void sum_device(float* d_buf, std::size_t count, void* stream,
                    const std::function<void()>& then) override {
      m_reducer.allreduce_sum(d_buf, count, stream, then);
    }

   private:
    NcclReducer m_reducer;
  };
  return std::make_unique<Nccl>(comm, device, timeout_s);
}

}  // namespace syncopt::cuda
