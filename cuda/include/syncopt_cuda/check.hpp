// The one family of CUDA-side check macros. Each evaluates its call once and,
// on failure, throws syncopt::InternalError naming the library, the error,
// the statement, file and line, the MPI rank (when MPI is up) and the host.
// The macros use each library's own error-string function, so a file that
// uses SYNCOPT_CHECK_CUDNN includes cudnn.h, and so on; this header itself
// needs no CUDA header.
#pragma once

namespace syncopt::cuda::detail {

// Builds the message and throws InternalError. `library` e.g. "CUDA",
// `error` the library's name/string of the code.
[[noreturn]] void throw_error(const char* library, const char* error, const char* stmt,
                              const char* file, int line);

}  // namespace syncopt::cuda::detail

#define SYNCOPT_CHECK_CUDA(call)                                                         \
  do {                                                                                   \
    const cudaError_t syncopt_cuda_rc_ = (call);                                         \
    if (syncopt_cuda_rc_ != cudaSuccess)                                                 \
      ::syncopt::cuda::detail::throw_error("CUDA", cudaGetErrorString(syncopt_cuda_rc_), \
                                           #call, __FILE__, __LINE__);                   \
  } while (0)

#define SYNCOPT_CHECK_CUDNN(call)                                                           \
  do {                                                                                      \
    const cudnnStatus_t syncopt_cudnn_rc_ = (call);                                         \
    if (syncopt_cudnn_rc_ != CUDNN_STATUS_SUCCESS)                                          \
      ::syncopt::cuda::detail::throw_error("cuDNN", cudnnGetErrorString(syncopt_cudnn_rc_), \
                                           #call, __FILE__, __LINE__);                      \
  } while (0)

#define SYNCOPT_CHECK_CUBLAS(call)                                                             \
  do {                                                                                         \
    const cublasStatus_t syncopt_cublas_rc_ = (call);                                          \
    if (syncopt_cublas_rc_ != CUBLAS_STATUS_SUCCESS)                                           \
      ::syncopt::cuda::detail::throw_error("cuBLAS", cublasGetStatusString(syncopt_cublas_rc_), \
                                           #call, __FILE__, __LINE__);                         \
  } while (0)

// NCCL errors leave the other ranks of the communicator waiting inside a
// collective: the caller passes the communicator, which is aborted (and
// nulled) before the throw. `comm` is an lvalue of type ncclComm_t.
#define SYNCOPT_CHECK_NCCL(call, comm)                                                 \
  do {                                                                                 \
    const ncclResult_t syncopt_nccl_rc_ = (call);                                      \
    if (syncopt_nccl_rc_ != ncclSuccess) {                                             \
      const char* syncopt_nccl_msg_ = ncclGetErrorString(syncopt_nccl_rc_);            \
      if ((comm) != nullptr) {                                                         \
        ncclCommAbort(comm);                                                           \
        (comm) = nullptr;                                                              \
      }                                                                                \
      ::syncopt::cuda::detail::throw_error("NCCL", syncopt_nccl_msg_, #call, __FILE__, \
                                           __LINE__);                                  \
    }                                                                                  \
  } while (0)
