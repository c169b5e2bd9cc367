// Device discovery, selection and identity (UUIDs across a node's ranks for
// NCCL), and the error reporter behind the check macros.
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "comm/mpi.hpp"
#include "common/error.hpp"
#include "syncopt_cuda/api.hpp"
#include "syncopt_cuda/check.hpp"

namespace syncopt::cuda {

namespace {

std::string host_name() {
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) != 0) return "?";
  return host.data();
}

std::string version_string(int v) {
  // CUDA encodes 13.0 as 13000.
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::string uuid_string(const cudaUUID_t& u) {
  // nvidia-smi's form: GPU-8-4-4-4-12 hex digits.
  std::string s = "GPU-";
  char hex[3];
  for (int i = 0; i < 16; ++i) {
    std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned char>(u.bytes[i]));
    s += hex;
    if (i == 3 || i == 5 || i == 7 || i == 9) s += '-';
  }
  return s;
}

}  // namespace

namespace detail {

std::string where() {
  std::string w;
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized != 0 && finalized == 0) {
    int rank = -1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    w += "rank " + std::to_string(rank) + ", ";
  }
  w += "host " + host_name();
  int device = -1;
  if (cudaGetDevice(&device) == cudaSuccess) w += ", device " + std::to_string(device);
  return w;
}

void throw_error(const char* library, const char* error, const char* stmt, const char* file,
                 int line) {
  throw InternalError(std::string(library) + " call failed: " + stmt + ": " + error + " (" + file +
                      ":" + std::to_string(line) + ", " + where() + ")");
}

}  // namespace detail

DeviceProbe classify_probe(int rc, const std::string& error, int count, int driver_version,
                           int runtime_version) {
  DeviceProbe p;
  if (rc == static_cast<int>(cudaSuccess)) {
    p.count = count;
    p.status = count > 0 ? DeviceProbe::Status::kOk : DeviceProbe::Status::kNone;
    if (count == 0) p.message = "no CUDA device";
    return p;
  }
  if (rc == static_cast<int>(cudaErrorNoDevice)) {
    p.status = DeviceProbe::Status::kNone;
    p.message = "no CUDA device (no GPU, or CUDA_VISIBLE_DEVICES hides them all)";
    return p;
  }
  if (rc == static_cast<int>(cudaErrorInsufficientDriver) && driver_version == 0) {
    // The runtime says "insufficient driver" when it finds no driver at all.
    p.status = DeviceProbe::Status::kNone;
    p.message = "no NVIDIA driver (libcuda) on this machine";
    return p;
  }
  p.status = DeviceProbe::Status::kError;
  if (rc == static_cast<int>(cudaErrorInsufficientDriver)) {
    p.message = "the NVIDIA driver supports CUDA " + version_string(driver_version) +
                ", older than this build's CUDA runtime " + version_string(runtime_version) + " (" +
                error +
                "); update the driver, or rebuild syncopt with a CUDA toolkit "
                "the driver supports";
  } else {
    p.message = "the CUDA runtime cannot use the GPUs: " + error + " (driver supports CUDA " +
                version_string(driver_version) + ", runtime " + version_string(runtime_version) +
                "); check nvidia-smi and the driver installation";
  }
  return p;
}

DeviceProbe probe_devices() noexcept {
  try {
    int n = 0;
    const cudaError_t rc = cudaGetDeviceCount(&n);
    if (rc != cudaSuccess) (void)cudaGetLastError();  // clear the sticky-free error state
    int driver = 0, runtime = 0;
    (void)cudaDriverGetVersion(&driver);
    (void)cudaRuntimeGetVersion(&runtime);
    const std::string error = std::string(cudaGetErrorName(rc)) + ": " + cudaGetErrorString(rc);
    return classify_probe(static_cast<int>(rc), error, n, driver, runtime);
  } catch (...) {  // std::string allocation only
    DeviceProbe p;
    p.status = DeviceProbe::Status::kError;
    p.message = "out of memory while probing CUDA devices";
    return p;
  }
}

int device_count() {
  const DeviceProbe p = probe_devices();
  if (p.status == DeviceProbe::Status::kError) {
    throw ConfigError("compute.backend = \"cuda\": " + p.message + " (host " + host_name() + ")");
  }
  return p.count;
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
    throw ConfigError("compute.backend = \"cuda\" but this process sees no CUDA device (" +
                      probe_devices().message + ", host " + host_name() +
                      "); run on a GPU node or use compute.backend = \"cpu\"");
  }
  if (local_rank < 0) throw InternalError("pick_device: negative local rank");
  return n == 1 ? 0 : local_rank % n;
}

std::string nccl_node_problem(const std::vector<RankDevice>& node) {
  std::map<std::string, std::vector<const RankDevice*>> by_uuid;
  for (const RankDevice& r : node) {
    if (!r.has_device) {
      return "rank " + std::to_string(r.rank) + " (host " + r.host + ") has no GPU: " + r.problem;
    }
    by_uuid[r.uuid].push_back(&r);
  }
  for (const auto& [uuid, ranks] : by_uuid) {
    if (ranks.size() < 2) continue;
    std::string who;
    for (const RankDevice* r : ranks) who += (who.empty() ? "" : ", ") + std::to_string(r->rank);
    return "ranks " + who + " on host " + ranks.front()->host + " share one GPU (" + uuid +
           ", PCI " + ranks.front()->pci +
           "); NCCL needs a GPU per rank (give each task its own GPU, e.g. "
           "SLURM --gpus-per-task=1, or start at most as many ranks per node as it has GPUs)";
  }
  return "";
}

namespace {

// One rank's entry of the survey, fixed size for MPI_Allgather.
struct WireDevice {
  char host[64];
  char uuid[48];
  char pci[24];
  char problem[256];
  int has_device;
};

void copy_str(char* dst, std::size_t n, const std::string& s) {
  std::snprintf(dst, n, "%s", s.c_str());
}

WireDevice describe_own(int device) {
  WireDevice w{};
  copy_str(w.host, sizeof w.host, host_name());
  const DeviceProbe p = probe_devices();
  if (device < 0 && p.status == DeviceProbe::Status::kOk) {
    copy_str(w.problem, sizeof w.problem, "it made no CUDA backend");
    return w;
  }
  if (device < 0 || p.status != DeviceProbe::Status::kOk || device >= p.count) {
    copy_str(w.problem, sizeof w.problem,
             p.status != DeviceProbe::Status::kOk
                 ? p.message
                 : "device " + std::to_string(device) + " does not exist");
    return w;
  }
  cudaDeviceProp prop{};
  std::array<char, 32> pci{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess ||
      cudaDeviceGetPCIBusId(pci.data(), static_cast<int>(pci.size()), device) != cudaSuccess) {
    (void)cudaGetLastError();
    copy_str(w.problem, sizeof w.problem,
             "cannot read the properties of device " + std::to_string(device));
    return w;
  }
  copy_str(w.uuid, sizeof w.uuid, uuid_string(prop.uuid));
  copy_str(w.pci, sizeof w.pci, pci.data());
  w.has_device = 1;
  return w;
}

}  // namespace

NcclPlan nccl_plan(MPI_Comm comm, int device) {
  int rank = 0;
  SYNCOPT_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  const WireDevice mine = describe_own(device);
  // The ranks of this node compare what they use.
  const comm::Communicator node(comm, comm::Communicator::kNodeLocal);
  const int local = node.size();
  std::vector<WireDevice> all(static_cast<std::size_t>(local));
  SYNCOPT_CHECK_MPI(
      MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, node.get()));
  std::vector<int> ranks(static_cast<std::size_t>(local));
  SYNCOPT_CHECK_MPI(MPI_Allgather(&rank, 1, MPI_INT, ranks.data(), 1, MPI_INT, node.get()));
  std::vector<RankDevice> entries;
  for (int i = 0; i < local; ++i) {
    const WireDevice& w = all[static_cast<std::size_t>(i)];
    entries.push_back(
        {ranks[static_cast<std::size_t>(i)], w.host, w.has_device != 0, w.uuid, w.pci, w.problem});
  }
  const std::string problem = nccl_node_problem(entries);
  // Agree over every node; the lowest rank with a problem tells it.
  int first_bad = problem.empty() ? std::numeric_limits<int>::max() : rank;
  SYNCOPT_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &first_bad, 1, MPI_INT, MPI_MIN, comm));
  NcclPlan plan;
  plan.usable = first_bad == std::numeric_limits<int>::max();
  if (!plan.usable) {
    std::array<char, 512> why{};
    if (rank == first_bad) copy_str(why.data(), why.size(), problem);
    SYNCOPT_CHECK_MPI(
        MPI_Bcast(why.data(), static_cast<int>(why.size()), MPI_CHAR, first_bad, comm));
    plan.reason = why.data();
  }
  return plan;
}

}  // namespace syncopt::cuda
