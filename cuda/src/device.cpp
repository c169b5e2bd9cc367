// Device discovery and selection, and the error reporter behind the check
// macros.
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <unistd.h>

#include <array>
#include <cstdlib>
#include <string>

#include "common/error.hpp"
#include "nn/backend.hpp"
#include "syncopt_cuda/api.hpp"
#include "syncopt_cuda/check.hpp"

namespace syncopt::cuda {

namespace detail {

void throw_error(const char* library, const char* error, const char* stmt, const char* file,
                 int line) {
  std::string where;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized != 0 && finalized == 0) {
    int rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    where += "rank " + std::to_string(rank) + ", ";
  }
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) != 0) host[0] = '\0';
  where += "host " + std::string(host.data());
  int device = -1;
  if (cudaGetDevice(&device) == cudaSuccess) where += ", device " + std::to_string(device);
  throw InternalError(std::string(library) + " call failed: " + stmt + ": " + error + " (" + file +
                      ":" + std::to_string(line) + ", " + where + ")");
}

}  // namespace detail

int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver / no device: clear and report none
    return 0;
  }
  return n;
}

int local_rank_from_env() noexcept {
  for (const char* name : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID",
                           "PMI_LOCAL_RANK", "MV2_COMM_WORLD_LOCAL_RANK"}) {
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') {
      char* end = nullptr;
      const long r = std::strtol(v, &end, 10);
      if (end != v && *end == '\0' && r >= 0) return static_cast<int>(r);
    }
  }
  return 0;
}

int pick_device(int local_rank) {
  const int n = device_count();
  if (n == 0) {
    throw ConfigError(
        "compute.backend = \"cuda\" but this process sees no CUDA device (no driver, no GPU, or "
        "CUDA_VISIBLE_DEVICES hides them); run on a GPU node or use compute.backend = \"cpu\"");
  }
  if (local_rank < 0) throw InternalError("pick_device: negative local rank");
  return local_rank % n;
}

}  // namespace syncopt::cuda
