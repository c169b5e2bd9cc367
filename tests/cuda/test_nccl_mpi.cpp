// NCCL under mpirun -np K against MPI_Allreduce, its oracle, and its
// deadline. Own main (no Catch2: every check is reduced over the ranks
// before anything is decided, so one failing rank cannot leave the others
// in a collective). Checks:
// 1. NcclReducer's host and device means (and sum) against MPI_Allreduce at
//    0, 1, 1001 floats and the reference CNN's parameter count
//    (nn::param_layout), relative error < 1e-6 (the sums run in other
//    orders);
// 2. the allreduce mode's step: a CudaReplica reducing through the NCCL
//    DeviceReducer (in place on the device) against a host replica on the
//    same network reducing through comm::make_mpi_reducer: gradients
//    within 1e-6, then θ after the update within 1e-6; the device replica
//    waits on the host twice per step (the loss, the reduction with the
//    finite check behind it);
// 3. the deadline: with one rank, a stream stuck before the allreduce makes
//    it fail within the deadline with a clear error; with several ranks,
//    the last rank never joins an allreduce and the others must fail within
//    deadline + grace, naming it.
// Ranks that share a GPU (mpirun -np 2 or 4 on a one-GPU machine) are run,
// not skipped: NCCL refuses two ranks of one host on one GPU, so each rank
// poses as a host of its own (a distinct NCCL_HOSTID) and NCCL carries the
// data over its network transport on the loopback interface. The
// communicators, the multi-rank allreduce kernels, the proxies and the
// abort under a deadline all run for real; only the transport differs from
// a node with a GPU per rank. The product never does this (allreduce mode
// sends a shared GPU's reduction through MPI, api.hpp's nccl_plan).
// Exit codes, the same on every rank: 0 pass, 1 fail, 77 skip (some rank
// has no GPU).
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "comm/reducer.hpp"
#include "common/error.hpp"
#include "nn/backend.hpp"
#include "nn/model.hpp"
#include "replica/replica.hpp"
#include "syncopt_cuda/api.hpp"
#include "syncopt_cuda/check.hpp"
#include "syncopt_cuda/memory.hpp"
#include "syncopt_cuda/sync.hpp"

namespace cu = syncopt::cuda;
namespace nn = syncopt::nn;

namespace {

int g_rank = 0, g_size = 1;

// Every rank's verdict: true on all ranks iff `ok` on all ranks.
bool all_agree(bool ok) {
  int v = ok ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return v == 1;
}

bool expect(bool cond, const std::string& what) {
  if (!cond) std::printf("rank %d: FAILED: %s\n", g_rank, what.c_str());
  return cond;
}

std::vector<float> rank_data(std::size_t n, int rank, std::uint64_t salt = 0) {
  std::mt19937_64 rng(1000 + static_cast<std::uint64_t>(rank) + 7919 * salt);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

double max_rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return scale > 0.0 ? diff / scale : diff;
}

// h -> d, complete when it returns. A plain cudaMemcpy (or cudaMemset) is
// ordered with the legacy default stream only, and from pageable memory may
// return before its DMA lands; the reducer reads on non-blocking streams.
void upload_now(cu::DeviceBuffer<float>& d, const std::vector<float>& h) {
  SYNCOPT_CHECK_CUDA(cudaMemcpy(d.get(), h.data(), d.nbytes(), cudaMemcpyHostToDevice));
  SYNCOPT_CHECK_CUDA(cudaDeviceSynchronize());
}

std::vector<float> mpi_mean(const std::vector<float>& mine) {
  std::vector<float> out(mine.size());
  MPI_Allreduce(mine.data(), out.data(), static_cast<int>(mine.size()), MPI_FLOAT, MPI_SUM,
                MPI_COMM_WORLD);
  const float inv = 1.0f / static_cast<float>(g_size);
  for (float& x : out) x *= inv;
  return out;
}

// 1. The reducer against MPI.
bool check_reducer(int device) {
  bool ok = true;
  cu::NcclReducer reducer(MPI_COMM_WORLD, device, 60.0);
  ok &= expect(reducer.rank() == g_rank && reducer.size() == g_size, "rank / size");
  const std::size_t model = nn::param_layout(nn::ModelSpec{}).count;  // the reference CNN
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{1001}, model}) {
    const auto mine = rank_data(n, g_rank);
    const auto expect_mean = mpi_mean(mine);
    std::vector<float> got = mine;
    reducer.allreduce_mean_host(got.data(), n);
    ok &= expect(max_rel_err(got, expect_mean) < 1e-6,
                 "allreduce_mean_host of " + std::to_string(n) + " floats: relative error " +
                     std::to_string(max_rel_err(got, expect_mean)));
    if (n == 0) continue;
    cu::DeviceBuffer<float> d(n);
    cu::CudaStream stream;
    upload_now(d, mine);
    reducer.allreduce_mean(d.get(), n, stream.get());  // waits
    std::vector<float> mean(n);
    SYNCOPT_CHECK_CUDA(cudaMemcpy(mean.data(), d.get(), d.nbytes(), cudaMemcpyDeviceToHost));
    ok &= expect(max_rel_err(mean, expect_mean) < 1e-6,
                 "allreduce_mean (device) of " + std::to_string(n) + " floats");
    upload_now(d, mine);
    reducer.allreduce_sum(d.get(), n, nullptr);
    std::vector<float> sum(n);
    SYNCOPT_CHECK_CUDA(cudaMemcpy(sum.data(), d.get(), d.nbytes(), cudaMemcpyDeviceToHost));
    for (float& x : sum) x /= static_cast<float>(g_size);
    ok &= expect(max_rel_err(sum, expect_mean) < 1e-6,
                 "allreduce_sum (device) of " + std::to_string(n) + " floats");
  }
  return ok;
}

// 2. The allreduce mode's step, NCCL in place against MPI on the host.
bool check_replica_step(int device) {
  bool ok = true;
  cu::CudaOptions opt;
  opt.deterministic = true;
  auto backend = cu::make_cuda_backend(1, device, opt);
  nn::ModelSpec spec;
  const nn::ParamLayout layout = nn::param_layout(spec);
  std::vector<float> init(layout.count);
  nn::init_params(spec, layout, init.data(), 5);
  const int batch = 32;
  auto net = backend->make_network(spec, batch);
  auto nccl = cu::make_nccl_reducer(MPI_COMM_WORLD, device, 60.0);
  auto mpi = syncopt::comm::make_mpi_reducer(MPI_COMM_WORLD);
  syncopt::replica::ReplicaOptions ro;
  ro.ema_decay = 0.99;
  auto dev = cu::make_cuda_replica(*net, init.data(), layout.count, ro);
  auto host = syncopt::replica::make_host_replica(*net, init.data(), layout.count, ro);
  // Each rank its own batch, as allreduce workers have.
  const auto images = rank_data(std::size_t{28 * 28} * batch, g_rank, 1);
  std::vector<std::int32_t> labels(batch);
  for (int r = 0; r < batch; ++r) labels[static_cast<std::size_t>(r)] = (r + g_rank) % 10;
  for (int step = 0; step < 3; ++step) {
    const std::uint64_t waits = cu::host_wait_count();
    const float ld = dev->compute_gradient(images.data(), labels.data(), batch);
    dev->reduce_gradient(*nccl);
    const bool dev_finite = dev->gradient_finite();
    const std::uint64_t dev_waits = cu::host_wait_count() - waits;
    // Step 0 plans the batch (cuDNN's choices, workspaces): waits of its own.
    if (step > 0) {
      ok &= expect(dev_waits == 2, "the device replica's NCCL step waited on the host " +
                                       std::to_string(dev_waits) + " times, not 2");
    }
    const float lh = host->compute_gradient(images.data(), labels.data(), batch);
    ok &= expect(ld == lh, "replica losses differ before the reduction");
    host->reduce_gradient(*mpi);
    ok &= expect(dev_finite && host->gradient_finite(), "finite gradients");
    dev->apply(0.05f);
    host->apply(0.05f);
    std::vector<float> td(layout.count), th(layout.count);
    dev->copy_theta(td.data());
    host->copy_theta(th.data());
    ok &= expect(max_rel_err(td, th) < 1e-6, "θ after NCCL vs MPI reduction, step " +
                                                 std::to_string(step) + ": relative error " +
                                                 std::to_string(max_rel_err(td, th)));
  }
  // Every rank holds the same θ (what allreduce mode relies on).
  std::vector<float> theta(layout.count);
  dev->copy_theta(theta.data());
  std::vector<float> theta0 = theta;
  MPI_Bcast(theta0.data(), static_cast<int>(theta0.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  ok &= expect(theta == theta0, "θ differs between ranks after NCCL reductions");
  return ok;
}

void CUDART_CB block_until_released(void* flag) {
  auto* released = static_cast<std::atomic<bool>*>(flag);
  while (!released->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// 3. The deadline.
bool check_deadline(int device) {
  constexpr double kDeadline = 3.0;
  constexpr double kGrace = 1.0;  // clamp(deadline / 4, 1, 15) in nccl_reducer.cpp
  const std::size_t n = 4096;
  bool ok = true;
  cu::NcclReducer reducer(MPI_COMM_WORLD, device, kDeadline);
  cu::DeviceBuffer<float> d(n);
  upload_now(d, std::vector<float>(n, 0.0f));
  reducer.allreduce_sum(d.get(), n, nullptr);  // a healthy one first
  std::string message;
  const auto t0 = std::chrono::steady_clock::now();
  if (g_size == 1) {
    // One rank: nobody can be missing, but a stream that never gets to the
    // NCCL kernel must still end in an error, not a hang.
    cu::CudaStream stream;
    std::atomic<bool> released{false};
    SYNCOPT_CHECK_CUDA(cudaLaunchHostFunc(stream.get(), block_until_released, &released));
    // Released from another thread half a second past the deadline, in case
    // ncclCommAbort waits for the device (a cudaFree) and so for the stream.
    std::thread release([&released, kDeadline] {
      std::this_thread::sleep_for(std::chrono::duration<double>(kDeadline + 0.5));
      released = true;
    });
    try {
      reducer.allreduce_sum(d.get(), n, stream.get());
    } catch (const syncopt::InternalError& e) {
      message = e.what();
    }
    const double waited = since(t0);
    release.join();
    cu::wait_stream(stream.get(), 10.0, "the released stream");
    std::printf("rank %d: stuck stream -> after %.2f s: %s\n", g_rank, waited, message.c_str());
    ok &= expect(message.find("allreduce #2 of 4096 floats") != std::string::npos &&
                     message.find("did not complete within cluster.dead_after_s = 3 s") !=
                         std::string::npos &&
                     message.find("aborted") != std::string::npos,
                 "the stuck allreduce's error says what, where and that it aborted");
    ok &= expect(waited >= kDeadline && waited < kDeadline + 2.0, "it failed at the deadline");
    return ok;
  }
  const int absent = g_size - 1;
  if (g_rank != absent) {
    try {
      reducer.allreduce_sum(d.get(), n, nullptr);
    } catch (const syncopt::InternalError& e) {
      message = e.what();
    }
    const double waited = since(t0);
    std::printf("rank %d: missing peer -> after %.2f s: %s\n", g_rank, waited, message.c_str());
    ok &= expect(
        message.find("did not complete within cluster.dead_after_s = 3 s") != std::string::npos,
        "the error names the deadline");
    ok &= expect(
        message.find("Never reached it: rank " + std::to_string(absent)) != std::string::npos,
        "the error names the absent rank");
    ok &= expect(waited >= kDeadline && waited < kDeadline + kGrace + 3.0,
                 "it failed within deadline + grace");
  }
  // The absent rank waits here; the others join once they have failed.
  MPI_Barrier(MPI_COMM_WORLD);
  return ok;
}

// Makes this rank a host of its own for NCCL (see the file comment), before
// its first communicator: NCCL reads NCCL_HOSTID once per process. The
// socket transport is pinned to the loopback interface (the only one every
// machine has), InfiniBand and multi-node NVLink are left out; a user's own
// settings of those win.
void pose_as_own_host() {
  std::array<char, 64> host{};
  if (gethostname(host.data(), host.size() - 1) != 0) host[0] = '?';
  const std::string id = std::string(host.data()) + "-syncopt-test-rank-" + std::to_string(g_rank);
  setenv("NCCL_HOSTID", id.c_str(), 1);
  setenv("NCCL_SOCKET_IFNAME", "lo", 0);
  setenv("NCCL_IB_DISABLE", "1", 0);
  setenv("NCCL_MNNVL_ENABLE", "0", 0);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  const cu::DeviceProbe probe = cu::probe_devices();
  int code = 0;
  // A driver that cannot serve this build fails, on every rank.
  if (!all_agree(probe.status != cu::DeviceProbe::Status::kError)) {
    if (probe.status == cu::DeviceProbe::Status::kError) {
      std::printf("rank %d: FAIL: %s\n", g_rank, probe.message.c_str());
    }
    MPI_Finalize();
    return 1;
  }
  int device = -1;
  if (probe.status == cu::DeviceProbe::Status::kOk)
    device = cu::pick_device(cu::local_rank_from_env());
  const cu::NcclPlan plan = cu::nccl_plan(MPI_COMM_WORLD, device);
  // Every rank has a GPU, yet NCCL cannot serve them as they are: some share one.
  const bool shared = !plan.usable && all_agree(device >= 0);
  if (shared) {
    pose_as_own_host();
    if (g_rank == 0) {
      std::printf(
          "%s\nso each of the %d ranks poses as its own host (NCCL_HOSTID): NCCL's network "
          "transport over the loopback interface carries the allreduce\n",
          plan.reason.c_str(), g_size);
    }
  }
  if (!plan.usable && !shared) {
    if (g_rank == 0)
      std::printf("SKIP: NCCL cannot serve %d rank(s) here: %s\n", g_size, plan.reason.c_str());
    code = 77;
  } else {
    bool ok = true;
    for (auto check : {check_reducer, check_replica_step, check_deadline}) {
      bool mine = false;
      try {
        mine = check(device);
      } catch (const std::exception& e) {
        std::printf("rank %d: %s\n", g_rank, e.what());
      }
      ok = all_agree(mine) && ok;
    }
    if (g_rank == 0) {
      std::printf("%s: NCCL on %d rank(s)%s: reducer vs MPI_Allreduce, replica step, deadline\n",
                  ok ? "PASS" : "FAIL", g_size,
                  shared ? " sharing one GPU, each its own NCCL host" : "");
    }
    code = ok ? 0 : 1;
  }
  MPI_Finalize();
  return code;
}
