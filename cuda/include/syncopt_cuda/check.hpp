// The one family of CUDA-side check macros. Each evaluates its call once and,
// on failure, throws syncopt::InternalError naming the library, the error,
// the statement, file and line, the MPI rank (when MPI is up), the host and
// the device. The macros use each library's own error-string function (and
// cuDNN's last error message), so a file that uses SYNCOPT_CHECK_CUDNN
// includes cudnn.h, and so on; this header itself needs no CUDA header. NCCL
// calls go through SYNCOPT_CHECK_NCCL_ASYNC of cuda/src/nccl_reducer.cpp (the
// one NCCL communicator, non-blocking): it polls ncclInProgress against the
// deadline and aborts the communicator before it throws, so no peer is left
// waiting inside NCCL.
#pragma once

#include <string>

namespace syncopt::cuda::detail {

// "rank R, host H, device D" of the calling process (rank only while MPI is
// initialised, device only when the runtime can tell).
std::string where();

// Builds the message and throws InternalError. `library` e.g. "CUDA",
// `error` the library's name/string of the code.
[[noreturn]] void throw_error(const char* library, const char* error, const char* stmt,
                              const char* file, int line);

}  // namespace syncopt::cuda::detail

#define SYNCOPT_CHECK_CUDA(call)                                                                \
  do {                                                                                          \
    const cudaError_t syncopt_cuda_rc_ = (call);                                                \
    if (syncopt_cuda_rc_ != cudaSuccess)                                                        \
      ::syncopt::cuda::detail::throw_error("CUDA", cudaGetErrorString(syncopt_cuda_rc_), #call, \
                                           __FILE__, __LINE__);                                 \
  } while (0)

// cuDNN 9 keeps the reason of the last failure of this thread
// (cudnnGetLastErrorString: a bad descriptor, an unsupported layout); the
// status name alone rarely says what to fix.
#define SYNCOPT_CHECK_CUDNN(call)                                                                  \
  do {                                                                                             \
    const cudnnStatus_t syncopt_cudnn_rc_ = (call);                                                \
    if (syncopt_cudnn_rc_ != CUDNN_STATUS_SUCCESS) {                                               \
      char syncopt_cudnn_msg_[1024] = {0};                                                         \
      cudnnGetLastErrorString(syncopt_cudnn_msg_, sizeof syncopt_cudnn_msg_);                      \
      const std::string syncopt_cudnn_error_ =                                                     \
          std::string(cudnnGetErrorString(syncopt_cudnn_rc_)) +                                    \
          (syncopt_cudnn_msg_[0] != 0 ? std::string(": ") + syncopt_cudnn_msg_ : std::string());   \
      ::syncopt::cuda::detail::throw_error("cuDNN", syncopt_cudnn_error_.c_str(), #call, __FILE__, \
                                           __LINE__);                                              \
    }                                                                                              \
  } while (0)

#define SYNCOPT_CHECK_CUBLAS(call)                                                              \
  do {                                                                                          \
    const cublasStatus_t syncopt_cublas_rc_ = (call);                                           \
    if (syncopt_cublas_rc_ != CUBLAS_STATUS_SUCCESS)                                            \
      ::syncopt::cuda::detail::throw_error("cuBLAS", cublasGetStatusString(syncopt_cublas_rc_), \
                                           #call, __FILE__, __LINE__);                          \
  } while (0)
