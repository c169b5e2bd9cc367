// The compute factory (see platform.hpp): the one `#if SYNCOPT_HAS_CUDA`.
#include "platform.hpp"

#include "common/error.hpp"

#if SYNCOPT_HAS_CUDA
#include "comm/mpi.hpp"
#include "syncopt_cuda/api.hpp"
#endif

namespace syncopt::app {

train::Compute make_compute(const std::string& backend, int threads) {
  if (backend == "cpu") {
    nn::make_cpu_backend(threads);  // validates threads now, not on the first rank that computes
    return train::cpu_compute(threads);
  }
  if (backend != "cuda") {
    throw ConfigError("unknown compute.backend \"" + backend + "\"; use \"cpu\" or \"cuda\"");
  }
#if SYNCOPT_HAS_CUDA
  train::Compute c = train::cpu_compute(threads);  // the host replica, until cuda/ has its own
  c.make_backend = [threads](int local_rank) {
    return cuda::make_cuda_backend(threads, cuda::pick_device(local_rank));
  };
  c.make_reducer = [](MPI_Comm comm) -> std::unique_ptr<comm::Reducer> {
    if (!cuda::nccl_usable(comm)) return comm::make_mpi_reducer(comm);
    return cuda::make_nccl_reducer(comm, cuda::pick_device(comm::node_local_rank(comm)));
  };
  c.describe = [](int local_rank) -> std::string {
    const int n = cuda::device_count();
    if (n == 0) return "cuda: no CUDA device visible (this rank would fail)";
    return "cuda:" + std::to_string(local_rank % n) + " of " + std::to_string(n) +
           " (node-local rank " + std::to_string(local_rank) + ")";
  };
  return c;
#else
  (void)threads;
  throw ConfigError(
      "compute.backend = \"cuda\" but this build has no CUDA backend; rebuild with "
      "-DSYNCOPT_WITH_CUDA=ON on a machine with the CUDA toolkit, or use compute.backend = "
      "\"cpu\"");
#endif
}

bool built_with_cuda() { return SYNCOPT_HAS_CUDA != 0; }

}  // namespace syncopt::app
