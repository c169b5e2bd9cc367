// The wire protocol against a real shard loop under MPI (2 ranks): rank 1
// plays a faulty worker and sends one bad message; the shard on rank 0 must
// throw an error naming the sender and the fault, never apply it, never hang.
// Ranks agree on the verdict before Catch2 asserts it.
#define CATCH_CONFIG_RUNNER
#include <mpi.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <vector>

#include "comm/mpi.hpp"
#include "comm/peers.hpp"
#include "comm/protocol.hpp"
#include "common/clock.hpp"
#include "common/error.hpp"
#include "config/config.hpp"
#include "layout/roles.hpp"
#include "mpi_test_main.hpp"
#include "ps/shard.hpp"

using namespace syncopt;

namespace {

// A fresh directory for the shard's checkpoints (rank 0's pid in the name).
std::filesystem::path scratch_dir() {
  int pid = static_cast<int>(::getpid());
  MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
  auto dir = std::filesystem::temp_directory_path() / ("syncopt-shard-test-" + std::to_string(pid));
  std::filesystem::create_directories(dir);
  return dir;
}

// Runs the shard on rank 0 against the messages `make` builds on rank 1
// (one, or two when `second` is given), the slice of `count` floats cut into
// `buckets` (empty: one). Returns (on rank 0) the error text, empty if none
// was thrown.
std::string shard_error_for(void (*make)(comm::Message&, std::size_t),
                            void (*second)(comm::Message&, std::size_t) = nullptr,
                            const std::vector<layout::Slice>& buckets = {}) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  config::Config cfg;
  cfg.train.mode = config::Mode::kSync;
  cfg.train.backups = 0;
  cfg.train.steps = 5;
  const layout::Roles roles = layout::make_roles(cfg, 2);
  const layout::Plan plan = layout::make_plan(cfg, roles, 100);
  const RunClock clock;
  const std::size_t count = 10;
  comm::Communicator data, ctrl, live;
  const auto peers = comm::gather_peers(MPI_COMM_WORLD);
  const auto run_dir = scratch_dir();
  std::string error;
  if (rank == 0) {
    std::vector<float> init(count, 1.0f);
    ps::ShardSetup st;
    st.cfg = &cfg;
    st.roles = &roles;
    st.shard = 0;
    st.slice = {0, count};
    st.buckets = buckets;
    st.initial = init.data();
    st.plan = &plan;
    st.data_comm = data.get();
    st.ctrl_comm = ctrl.get();
    st.live_comm = live.get();
    st.peers = &peers;
    st.run_dir = run_dir;
    st.clock = &clock;
    auto log = metrics::StepLog::in_memory();
    st.steps_log = &log;
    try {
      ps::Shard shard(st);
      shard.run();
    } catch (const InternalError& e) {
      error = e.what();
    }
  } else {
    for (auto* build : {make, second}) {
      if (build == nullptr) continue;
      comm::Message m(count + 1);
      build(m, count);
      const int bytes = comm::Message::wire_bytes(m.header().count);
      MPI_Send(m.data(), std::min(bytes, m.max_bytes()), MPI_BYTE, 0, comm::kTagToShard,
               data.get());
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return error;
}

void good_header(comm::Message& m, std::size_t count) {
  auto& h = m.header();
  h = comm::MsgHeader{};
  h.kind = static_cast<std::uint16_t>(comm::Kind::kGrad);
  h.sender = 1;
  h.shard = 0;
  h.param_version = 0;
  h.count = static_cast<std::uint32_t>(count);
}

bool rank0_contains(const std::string& error, const char* a, const char* b) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) return agreed(true);
  return agreed(error.find(a) != std::string::npos && error.find(b) != std::string::npos);
}

}  // namespace

TEST_CASE("a corrupt header is rejected naming the sender", "[mpi][protocol]") {
  const std::string e = shard_error_for([](comm::Message& m, std::size_t count) {
    good_header(m, count);
    m.header().magic = 0xdeadbeef;
  });
  CHECK(rank0_contains(e, "rank 1", "bad magic"));
}

TEST_CASE("a gradient with the wrong count is rejected", "[mpi][protocol]") {
  // Fewer floats than the slice: received, then refused by the header check.
  const std::string e = shard_error_for([](comm::Message& m, std::size_t count) {
    good_header(m, count);
    m.header().count = static_cast<std::uint32_t>(count - 1);
  });
  CHECK(rank0_contains(e, "rank 1", "carries 9 floats, expected 10"));
  // More floats than any message may carry: the receive itself fails.
  const std::string big = shard_error_for([](comm::Message& m, std::size_t count) {
    good_header(m, count);
    m.header().count = static_cast<std::uint32_t>(count + 1);
  });
  CHECK(rank0_contains(big, "rank 1", "could not be received"));
}

TEST_CASE("an unknown message kind is rejected", "[mpi][protocol]") {
  const std::string e = shard_error_for([](comm::Message& m, std::size_t count) {
    good_header(m, count);
    m.header().kind = 99;
  });
  CHECK(rank0_contains(e, "rank 1", "unknown message kind 99"));
}

TEST_CASE("a gradient bucket the slice does not have is rejected", "[mpi][protocol][pipeline]") {
  // The slice is one bucket; the message claims to be bucket 1 of 2.
  const std::string e = shard_error_for([](comm::Message& m, std::size_t count) {
    good_header(m, count);
    m.header().buckets = 2;
    m.header().bucket = 1;
  });
  CHECK(rank0_contains(e, "rank 1", "bucket 1 of 2, but this slice has 1 bucket(s)"));
  // Two buckets [0, 4) and [4, 10): bucket 1 at the wrong offset.
  const std::vector<layout::Slice> two{{0, 4}, {4, 6}};
  const std::string off = shard_error_for(
      [](comm::Message& m, std::size_t) {
        good_header(m, 6);
        m.header().buckets = 2;
        m.header().bucket = 1;
        m.header().offset = 3;
      },
      nullptr, two);
  CHECK(rank0_contains(off, "rank 1", "bucket 1 starts at 3, expected 4"));
}

TEST_CASE("gradient buckets out of order are rejected", "[mpi][protocol][pipeline]") {
  // Bucket 1 (the top layers) must come first; bucket 0 first is refused.
  const std::vector<layout::Slice> two{{0, 4}, {4, 6}};
  const std::string e = shard_error_for(
      [](comm::Message& m, std::size_t) {
        good_header(m, 4);
        m.header().buckets = 2;
        m.header().bucket = 0;
      },
      nullptr, two);
  CHECK(rank0_contains(e, "rank 1", "gradient bucket 0 from worker rank 1, expected bucket 1"));
  // In order, then bucket 1 again where bucket 0 is due.
  const std::string again = shard_error_for(
      [](comm::Message& m, std::size_t) {
        good_header(m, 6);
        m.header().buckets = 2;
        m.header().bucket = 1;
        m.header().offset = 4;
      },
      [](comm::Message& m, std::size_t) {
        good_header(m, 6);
        m.header().buckets = 2;
        m.header().bucket = 1;
        m.header().offset = 4;
      },
      two);
  CHECK(rank0_contains(again, "rank 1", "gradient bucket 1 from worker rank 1, expected bucket 0"));
}

int main(int argc, char** argv) { return run_catch_under_mpi(argc, argv); }
