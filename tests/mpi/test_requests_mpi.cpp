// The owning request sets of comm/requests.hpp under MPI (2 ranks): text
// sent through a SendQueue and taken whole by receive_text (the end phase's
// records), RecvSlots::wait_all with and without its messages, and a send
// nobody takes in time: its queue is destroyed, and the buffer it hands to
// keep_until_finalize() must still hold the text when the receiver takes it
// late (or the send was cancelled and nothing comes).
#define CATCH_CONFIG_RUNNER
#include <mpi.h>

#include <catch2/catch.hpp>
#include <optional>
#include <string>

#include "comm/protocol.hpp"
#include "comm/requests.hpp"
#include "mpi_test_main.hpp"

using namespace syncopt;

namespace {

constexpr int kTagText = 91;
constexpr int kTagLate = 92;
constexpr int kTagSlot = 93;

int rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// Large enough that MPI cannot send it eagerly: it waits for the receiver.
std::string big_text(char c) { return std::string(8u << 20, c) + "end"; }

}  // namespace

TEST_CASE("text through a SendQueue arrives whole", "[mpi][requests]") {
  const std::string text = "{\"step\": 1}\n{\"step\": 2}\n";
  bool ok = true;
  if (rank() == 0) {
    comm::SendQueue q(MPI_COMM_WORLD);
    q.send_text(text, 1, kTagText);
    q.send_text("", 1, kTagText);  // no records: an empty message
    ok = q.drain(30.0);
  } else {
    const auto got = comm::receive_text(0, kTagText, MPI_COMM_WORLD, 30.0);
    const auto empty = comm::receive_text(0, kTagText, MPI_COMM_WORLD, 30.0);
    ok = got == text && empty == std::string();
  }
  CHECK(agreed(ok));
}

TEST_CASE("RecvSlots::wait_all waits for every slot, or cancels at its limit", "[mpi][requests]") {
  bool ok = true;
  if (rank() == 0) {
    comm::SendQueue q(MPI_COMM_WORLD);
    q.send(comm::make_message(0, comm::make_header(comm::Kind::kCtrl, 0, 1)), 1, kTagSlot);
    ok = q.drain(30.0);
  } else {
    comm::RecvSlots slots;
    slots.post(slots.add(0, kTagSlot, MPI_COMM_WORLD, 0));
    ok = slots.wait_all(30.0);
    // Nothing else comes: the receive is cancelled at the limit.
    slots.post(0);
    ok = ok && !slots.wait_all(0.2) && !slots.any_active();
  }
  CHECK(agreed(ok));
}

TEST_CASE("a send not taken in time keeps its buffer until MPI_Finalize", "[mpi][requests]") {
  const std::string text = big_text('a');
  bool ok = true;
  if (rank() == 0) {
    {
      comm::SendQueue q(MPI_COMM_WORLD);
      q.send_text(text, 1, kTagLate);
      ok = !q.drain(0.2);  // rank 1 is not receiving yet
    }                      // cancelled, or its buffer kept
    // Were the buffer freed, this would likely take its place.
    const std::string reuse = big_text('X');
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    ok = ok && reuse.size() == text.size();
  } else {
    MPI_Barrier(MPI_COMM_WORLD);
    const auto got = comm::receive_text(0, kTagLate, MPI_COMM_WORLD, 2.0);
    ok = !got || *got == text;
    MPI_Barrier(MPI_COMM_WORLD);
  }
  CHECK(agreed(ok));
}

int main(int argc, char** argv) { return run_catch_under_mpi(argc, argv); }
