// syncopt_cuda_versions: which CUDA libraries a syncopt binary loads on this
// machine, from where, and in which versions, as one JSON object on stdout
// (scripts/gpu-check.sh records it before any GPU step). It links what
// syncopt links (syncopt_cuda), so the loader resolves the same files. Needs
// no GPU: the runtime, cuBLAS, cuDNN and NCCL all answer their version
// without one; with a GPU, a cuBLAS and a cuDNN handle are made too, so that
// the libraries they load on demand (cuBLASLt's kernels, cuDNN's
// sub-libraries) are listed as well.
//
// Exit 0 when every library loaded and can serve the build: the cuBLAS and
// cuDNN majors it was built against, NCCL 2.14 or newer (the oldest with
// every call cuda/ makes: ncclCommInitRankConfig, ncclCommFinalize), a
// driver that supports the runtime, or no driver at all; 1 with "problems"
// listing what cannot. "notes" say what differs but works (an NCCL older
// than the headers, yet >= 2.14).
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <link.h>
#include <nccl.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "syncopt_cuda/api.hpp"

namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// CUDA's 13000 -> "13.0".
std::string cuda_version(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// cuDNN 9's 91300 -> "9.13.0".
std::string cudnn_version(std::size_t v) {
  return std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." +
         std::to_string(v % 100);
}

// NCCL's 22809 -> "2.28.9" (the code of NCCL >= 2.9).
std::string nccl_version(int v) {
  return std::to_string(v / 10000) + "." + std::to_string((v % 10000) / 100) + "." +
         std::to_string(v % 100);
}

int loaded_object(dl_phdr_info* info, std::size_t, void* data) {
  auto* paths = static_cast<std::vector<std::string>*>(data);
  if (info->dlpi_name != nullptr && info->dlpi_name[0] != '\0')
    paths->emplace_back(info->dlpi_name);
  return 0;
}

// The NVIDIA kernel module's version line, e.g. "... Kernel Module  580.159.03 ...".
std::string driver_release() {
  std::ifstream f("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(f, line)) return "";
  const auto at = line.find("Module");
  if (at == std::string::npos) return line;
  std::string rest = line.substr(at + 6);
  const auto b = rest.find_first_not_of(' ');
  const auto e = rest.find(' ', b);
  return b == std::string::npos ? "" : rest.substr(b, e == std::string::npos ? e : e - b);
}

}  // namespace

int main() {
  namespace cu = syncopt::cuda;
  std::vector<std::string> problems;
  int runtime = 0, driver = 0;
  (void)cudaRuntimeGetVersion(&runtime);
  (void)cudaDriverGetVersion(&driver);
  const cu::DeviceProbe probe = cu::probe_devices();
  if (probe.status == cu::DeviceProbe::Status::kError) problems.push_back(probe.message);

  int cublas_major = 0, cublas_minor = 0, cublas_patch = 0;
  (void)cublasGetProperty(MAJOR_VERSION, &cublas_major);
  (void)cublasGetProperty(MINOR_VERSION, &cublas_minor);
  (void)cublasGetProperty(PATCH_LEVEL, &cublas_patch);
  if (cublas_major != CUBLAS_VER_MAJOR) {
    problems.push_back("cuBLAS " + std::to_string(cublas_major) + " loaded, built against " +
                       std::to_string(CUBLAS_VER_MAJOR));
  }
  const std::size_t cudnn = cudnnGetVersion();
  if (cudnn / 10000 != CUDNN_MAJOR) {
    problems.push_back("cuDNN " + cudnn_version(cudnn) + " loaded, built against " +
                       cudnn_version(CUDNN_VERSION));
  }
  std::vector<std::string> notes;
  int nccl = 0;
  (void)ncclGetVersion(&nccl);
  constexpr int kOldestNccl = 21400;
  if (nccl < kOldestNccl) {
    problems.push_back("NCCL " + nccl_version(nccl) + " loaded; cuda/ needs " +
                       nccl_version(kOldestNccl) + " or newer");
  } else if (nccl < NCCL_VERSION_CODE) {
    notes.push_back("NCCL " + nccl_version(nccl) + " loaded, older than the " +
                    nccl_version(NCCL_VERSION_CODE) + " headers of the build (it has every call)");
  }
  if (driver != 0 && driver < runtime) {
    problems.push_back("the driver supports CUDA " + cuda_version(driver) +
                       ", older than the CUDA runtime " + cuda_version(runtime));
  }
  if (probe.status == cu::DeviceProbe::Status::kOk) {
    cublasHandle_t blas = nullptr;
    if (cublasCreate(&blas) == CUBLAS_STATUS_SUCCESS) {
      cublasDestroy(blas);
    } else {
      problems.push_back("cublasCreate failed on a machine with a GPU");
    }
    cudnnHandle_t dnn = nullptr;
    if (cudnnCreate(&dnn) == CUDNN_STATUS_SUCCESS) {
      cudnnDestroy(dnn);
    } else {
      problems.push_back("cudnnCreate failed on a machine with a GPU");
    }
  }

  std::vector<std::string> paths;
  dl_iterate_phdr(loaded_object, &paths);
  std::string out = "{";
  out += "\"cuda_runtime\": " + json_string(cuda_version(runtime));
  out += ", \"cuda_runtime_built\": " + json_string(cuda_version(CUDART_VERSION));
  out += ", \"driver_cuda\": " + (driver != 0 ? json_string(cuda_version(driver)) : "null");
  const std::string release = driver_release();
  out += ", \"driver_release\": " + (release.empty() ? "null" : json_string(release));
  out += ", \"devices\": " + std::to_string(probe.count);
  out += ", \"device_probe\": " + json_string(probe.message.empty() ? "ok" : probe.message);
  out += ", \"cublas\": " +
         json_string(std::to_string(cublas_major) + "." + std::to_string(cublas_minor) + "." +
                     std::to_string(cublas_patch));
  out += ", \"cudnn\": " + json_string(cudnn_version(cudnn));
  out += ", \"cudnn_built\": " + json_string(cudnn_version(CUDNN_VERSION));
  out += ", \"nccl\": " + json_string(nccl_version(nccl));
  out += ", \"nccl_built\": " + json_string(nccl_version(NCCL_VERSION_CODE));
  out += ", \"loaded\": [";
  for (std::size_t i = 0; i < paths.size(); ++i) out += (i ? ", " : "") + json_string(paths[i]);
  out += "], \"notes\": [";
  for (std::size_t i = 0; i < notes.size(); ++i) out += (i ? ", " : "") + json_string(notes[i]);
  out += "], \"problems\": [";
  for (std::size_t i = 0; i < problems.size(); ++i) {
    out += (i ? ", " : "") + json_string(problems[i]);
  }
  out += "]}";
  std::printf("%s\n", out.c_str());
  return problems.empty() ? 0 : 1;
}
