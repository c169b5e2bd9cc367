// RAII owners of cuBLAS / cuDNN handles and cuDNN descriptors (private to
// cuda/src). Each wraps one create/destroy pair; move-only; destructors
// never throw.
#pragma once

#include <cublas_v2.h>
#include <cudnn.h>

#include <utility>

#include "syncopt_cuda/check.hpp"

namespace syncopt::cuda {

// One RAII class per (type, create, destroy) triple.
template <class H, cudnnStatus_t (*Create)(H*), cudnnStatus_t (*Destroy)(H)>
class CudnnObject {
 public:
  CudnnObject() { SYNCOPT_CHECK_CUDNN(Create(&m_h)); }
  ~CudnnObject() {
    if (m_h != nullptr) (void)Destroy(m_h);
  }
  CudnnObject(const CudnnObject&) = delete;
  CudnnObject& operator=(const CudnnObject&) = delete;
  CudnnObject(CudnnObject&& o) noexcept : m_h(std::exchange(o.m_h, nullptr)) {}
  CudnnObject& operator=(CudnnObject&& o) noexcept {
    if (this != &o) {
      if (m_h != nullptr) (void)Destroy(m_h);
      m_h = std::exchange(o.m_h, nullptr);
    }
    return *this;
  }
  H get() const noexcept { return m_h; }

 private:
  H m_h = nullptr;
};

using CudnnHandle = CudnnObject<cudnnHandle_t, cudnnCreate, cudnnDestroy>;
using TensorDesc =
    CudnnObject<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc =
    CudnnObject<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc = CudnnObject<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor,
                             cudnnDestroyConvolutionDescriptor>;
using PoolDesc = CudnnObject<cudnnPoolingDescriptor_t, cudnnCreatePoolingDescriptor,
                             cudnnDestroyPoolingDescriptor>;

class CublasHandle {
 public:
  CublasHandle() { SYNCOPT_CHECK_CUBLAS(cublasCreate(&m_h)); }
  ~CublasHandle() {
    if (m_h != nullptr) (void)cublasDestroy(m_h);
  }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  CublasHandle(CublasHandle&& o) noexcept : m_h(std::exchange(o.m_h, nullptr)) {}
  CublasHandle& operator=(CublasHandle&& o) noexcept {
    if (this != &o) {
      if (m_h != nullptr) (void)cublasDestroy(m_h);
      m_h = std::exchange(o.m_h, nullptr);
    }
    return *this;
  }
  cublasHandle_t get() const noexcept { return m_h; }

 private:
  cublasHandle_t m_h = nullptr;
};

}  // namespace syncopt::cuda
