// Bounded waits (syncopt_cuda/sync.hpp): a stream whose work never ends is
// an error after the deadline, not a hang. The stuck work is a host
// function enqueued on the stream that blocks until the test releases it.
// main.cpp: SKIP (77) without a GPU.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>

#include "common/error.hpp"
#include "syncopt_cuda/api.hpp"
#include "syncopt_cuda/check.hpp"
#include "syncopt_cuda/memory.hpp"
#include "syncopt_cuda/sync.hpp"

namespace cu = syncopt::cuda;

namespace {

void CUDART_CB block_until_released(void* flag) {
  auto* released = static_cast<std::atomic<bool>*>(flag);
  while (!released->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

}  // namespace

TEST_CASE("wait_stream: a stuck stream is an error after the deadline", "[cuda][sync]") {
  SYNCOPT_CHECK_CUDA(cudaSetDevice(cu::pick_device(0)));
  cu::CudaStream stream;
  cu::CudaEvent event;
  std::atomic<bool> released{false};
  SYNCOPT_CHECK_CUDA(cudaLaunchHostFunc(stream.get(), block_until_released, &released));
  SYNCOPT_CHECK_CUDA(cudaEventRecord(event.get(), stream.get()));
  const auto t0 = std::chrono::steady_clock::now();
  std::string message;
  try {
    cu::wait_stream(stream.get(), 0.5, "the test's stuck stream");
  } catch (const syncopt::InternalError& e) {
    message = e.what();
  }
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(message);
  CHECK(message.find("the test's stuck stream did not finish within 0.5 s") != std::string::npos);
  CHECK(message.find("host ") != std::string::npos);
  CHECK(waited >= 0.5);
  CHECK(waited < 2.0);
  CHECK_THROWS_AS(cu::wait_event(event.get(), 0.2, "the test's event"), syncopt::InternalError);
  released = true;
  cu::wait_stream(stream.get(), 10.0, "the released stream");  // finishes now
  cu::wait_event(event.get(), 10.0, "the released event");
}
