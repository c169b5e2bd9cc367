// RAII owners of CUDA runtime resources: device and pinned host buffers sized
// in elements, streams and events. Move-only; destructors never throw (a failure to
// free at teardown cannot be acted on, and throwing there would terminate).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "syncopt_cuda/check.hpp"

namespace syncopt::cuda {

namespace detail {

// Where an OwnedBuffer's memory comes from.
struct DeviceMemory {
  static cudaError_t allocate(void** p, std::size_t nbytes) { return cudaMalloc(p, nbytes); }
  static void release(void* p) noexcept { (void)cudaFree(p); }
};
struct PinnedHostMemory {
  static cudaError_t allocate(void** p, std::size_t nbytes) { return cudaMallocHost(p, nbytes); }
  static void release(void* p) noexcept { (void)cudaFreeHost(p); }
};

// `count` elements of T (uninitialised), move-only, freed by a destructor
// that never throws. count 0 holds no allocation.
template <class T, class Memory>
class OwnedBuffer {
 public:
  OwnedBuffer() = default;
  explicit OwnedBuffer(std::size_t count) : m_count(count) {
    if (count > 0) {
      SYNCOPT_CHECK_CUDA(Memory::allocate(reinterpret_cast<void**>(&m_ptr), count * sizeof(T)));
    }
  }
  ~OwnedBuffer() { release(); }
  OwnedBuffer(const OwnedBuffer&) = delete;
  OwnedBuffer& operator=(const OwnedBuffer&) = delete;
  OwnedBuffer(OwnedBuffer&& o) noexcept
      : m_ptr(std::exchange(o.m_ptr, nullptr)), m_count(std::exchange(o.m_count, 0)) {}
  OwnedBuffer& operator=(OwnedBuffer&& o) noexcept {
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
    if (m_ptr != nullptr) Memory::release(m_ptr);
    m_ptr = nullptr;
    m_count = 0;
  }
  T* m_ptr = nullptr;
  std::size_t m_count = 0;
};

}  // namespace detail

// `count` elements of T in device memory of the current device.
template <class T>
using DeviceBuffer = detail::OwnedBuffer<T, detail::DeviceMemory>;

// `count` elements of T in page-locked host memory, so that
// cudaMemcpyAsync from / to it is truly asynchronous.
template <class T>
using PinnedBuffer = detail::OwnedBuffer<T, detail::PinnedHostMemory>;

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

 private:
  cudaStream_t m_stream = nullptr;
};

// An event without timing (the cheapest kind), for ordering work across
// streams and for bounded host waits (syncopt_cuda/sync.hpp).
class CudaEvent {
 public:
  CudaEvent() { SYNCOPT_CHECK_CUDA(cudaEventCreateWithFlags(&m_event, cudaEventDisableTiming)); }
  ~CudaEvent() {
    if (m_event != nullptr) (void)cudaEventDestroy(m_event);
  }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  CudaEvent(CudaEvent&& o) noexcept : m_event(std::exchange(o.m_event, nullptr)) {}
  CudaEvent& operator=(CudaEvent&& o) noexcept {
    if (this != &o) {
      if (m_event != nullptr) (void)cudaEventDestroy(m_event);
      m_event = std::exchange(o.m_event, nullptr);
    }
    return *this;
  }

  cudaEvent_t get() const noexcept { return m_event; }

 private:
  cudaEvent_t m_event = nullptr;
};

}  // namespace syncopt::cuda
