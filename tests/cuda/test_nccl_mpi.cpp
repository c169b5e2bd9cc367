// NcclReducer against MPI_Allreduce, its oracle, under mpirun -np K. Own
// main (no Catch2: every check is reduced over the ranks before anything is
// decided, so one failing rank cannot leave the others in a collective).
// Exit codes, the same on every rank: 0 pass, 1 fail, 77 skip (some rank
// sees no CUDA device, or a node has more ranks than GPUs, which NCCL does
// not allow).
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "syncopt_cuda/api.hpp"
#include "syncopt_cuda/memory.hpp"

namespace cu = syncopt::cuda;

namespace {

// Every rank's verdict: true on all ranks iff `ok` on all ranks.
bool all_agree(bool ok) {
  int v = ok ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return v == 1;
}

std::vector<float> rank_data(std::size_t n, int rank) {
  std::mt19937_64 rng(1000 + static_cast<std::uint64_t>(rank));
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

// Returns this rank's verdict; prints what failed.
bool run_checks(int rank, int size) {
  bool ok = true;
  cu::NcclReducer reducer(MPI_COMM_WORLD, cu::pick_device(cu::local_rank_from_env()));
  ok = ok && reducer.rank() == rank && reducer.size() == size;
  // Sizes: empty, one element, odd, and the reference CNN's parameter count.
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{1001},
                              std::size_t{847434}}) {
    const auto mine = rank_data(n, rank);
    std::vector<float> expect(n);
    MPI_Allreduce(mine.data(), expect.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    for (float& x : expect) x /= static_cast<float>(size);
    std::vector<float> got = mine;
    reducer.allreduce_mean_host(got.data(), n);
    const double err = max_rel_err(got, expect);
    if (!(err < 1e-6)) {
      std::printf("rank %d: allreduce_mean_host of %zu floats: relative error %g\n", rank, n, err);
      ok = false;
    }
    // The device path: sum in place on the caller's stream.
    if (n > 0) {
      cu::DeviceBuffer<float> d(n);
      cu::CudaStream stream;
      cudaMemcpy(d.get(), mine.data(), d.nbytes(), cudaMemcpyHostToDevice);
      reducer.allreduce_sum(d.get(), n, stream.get());
      stream.synchronize();
      std::vector<float> sum(n);
      cudaMemcpy(sum.data(), d.get(), d.nbytes(), cudaMemcpyDeviceToHost);
      for (float& x : sum) x /= static_cast<float>(size);
      const double err2 = max_rel_err(sum, expect);
      if (!(err2 < 1e-6)) {
        std::printf("rank %d: allreduce_sum of %zu floats: relative error %g\n", rank, n, err2);
        ok = false;
      }
    }
  }
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int code = 0;
  if (!cu::nccl_usable(MPI_COMM_WORLD)) {
    if (rank == 0) {
      std::printf("SKIP: NCCL needs a CUDA device per rank (some rank sees none, or a node runs "
                  "more ranks than it has GPUs)\n");
    }
    code = 77;
  } else {
    bool ok = false;
    try {
      ok = run_checks(rank, size);
    } catch (const std::exception& e) {
      std::printf("rank %d: %s\n", rank, e.what());
      ok = false;
    }
    ok = all_agree(ok);
    if (rank == 0) std::printf("%s: NcclReducer on %d rank(s) vs MPI_Allreduce\n",
                               ok ? "PASS" : "FAIL", size);
    code = ok ? 0 : 1;
  }
  MPI_Finalize();
  return code;
}
