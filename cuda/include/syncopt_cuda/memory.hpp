// RAII owners of CUDA runtime resources: device and pinned host buffers sized
// in elements, and streams. Move-only; destructors never throw (a failure to
// free at teardown cannot be acted on, and throwing there would terminate).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "syncopt_cuda/check.hpp"

namespace syncopt::cuda {

// `count` elements of T in device memory of the current device
// (uninitialised). count 0 holds no allocation.
template <class T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count) : m_count(count) {
    if (count > 0) {
      SYNCOPT_CHECK_CUDA(cudaMalloc(reinterpret_cast<void**>(&m_ptr), count * sizeof(T)));
    }
  }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept
      : m_ptr(std::exchange(o.m_ptr, nullptr)), m_count(std::exchange(o.m_count, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
      release();
      m_ptr = std::exchange(o.m_ptr, nullptr);
      m_count = std::exchange(o.m_count, 0);
    }
    return *this;
  }

  T* get() const noexcept { return m_ptr; }
  std::size_t count() const noexcept { return m_count; }
  std::size_t nbytes() const noexcept { return m_count * sizeof(T); }

 private:
  void release() noexcept {
    if (m_ptr != nullptr) (void)cudaFree(m_ptr);
    m_ptr = nullptr;
    m_count = 0;
  }
  T* m_ptr = nullptr;
  std::size_t m_count = 0;
};

// `count` elements of T in page-locked host memory, so that
// cudaMemcpyAsync from / to it is truly asynchronous.
template <class T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t count) : m_count(count) {
    if (count > 0) {
      SYNCOPT_CHECK_CUDA(cudaMallocHost(reinterpret_cast<void**>(&m_ptr), count * sizeof(T)));
    }
  }
  ~PinnedBuffer() { release(); }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  PinnedBuffer(PinnedBuffer&& o) noexcept
      : m_ptr(std::exchange(o.m_ptr, nullptr)), m_count(std::exchange(o.m_count, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    if (this != &o) {
      release();
      m_ptr = std::exchange(o.m_ptr, nullptr);
      m_count = std::exchange(o.m_count, 0);
    }
    return *this;
  }

  T* get() const noexcept { return m_ptr; }
  std::size_t count() const noexcept { return m_count; }

 private:
  void release() noexcept {
    if (m_ptr != nullptr) (void)cudaFreeHost(m_ptr);
    m_ptr = nullptr;
    m_count = 0;
  }
  T* m_ptr = nullptr;
  std::size_t m_count = 0;
};

// A non-blocking stream on the current device (it does not serialise with
// the legacy default stream that other libraries may use).
class CudaStream {
 public:
  CudaStream() { SYNCOPT_CHECK_CUDA(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking)); }
  ~CudaStream() {
    if (m_stream != nullptr) (void)cudaStreamDestroy(m_stream);
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  CudaStream(CudaStream&& o) noexcept : m_stream(std::exchange(o.m_stream, nullptr)) {}
  CudaStream& operator=(CudaStream&& o) noexcept {
    if (this != &o) {
      if (m_stream != nullptr) (void)cudaStreamDestroy(m_stream);
      m_stream = std::exchange(o.m_stream, nullptr);
    }
    return *this;
  }

  cudaStream_t get() const noexcept { return m_stream; }
  void synchronize() const { SYNCOPT_CHECK_CUDA(cudaStreamSynchronize(m_stream)); }

 private:
  cudaStream_t m_stream = nullptr;
};

}  // namespace syncopt::cuda
