// The flight recorder (comm/flight.hpp) without MPI: the ring keeps the
// last N events, an operation in flight stays in its table however many
// events follow, a dump appends and keeps earlier dumps, and the report's
// section (metrics/flight_report.hpp) names what a rank waited for and the
// ranks that left no dump.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/flight.hpp"
#include "comm/protocol.hpp"
#include "metrics/flight_report.hpp"

namespace fl = syncopt::comm::flight;
namespace fs = std::filesystem;
using syncopt::comm::Kind;

namespace {

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("syncopt-flight-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void start(const fs::path& dir, int rank, std::size_t events) {
  fl::Setup s;
  s.run_dir = dir;
  s.launch_id = "L1";
  s.rank = rank;
  s.role = rank == 0
               ? "shard 0 (rank 0)"
               : "worker " + std::to_string(rank - 1) + " (rank " + std::to_string(rank) + ")";
  s.events = events;
  s.name_of = [](int r) {
    return r == 0 ? std::string("shard 0 (rank 0)")
                  : "worker " + std::to_string(r - 1) + " (rank " + std::to_string(r) + ")";
  };
  s.now = [] { return 42.0; };
  fl::start(std::move(s));
}

std::vector<nlohmann::json> lines(const fs::path& file) {
  std::vector<nlohmann::json> out;
  std::ifstream in(file);
  for (std::string l; std::getline(in, l);) out.push_back(nlohmann::json::parse(l));
  return out;
}

fl::Ticket recv_grad(int peer, std::uint64_t version) {
  auto h = syncopt::comm::make_header(Kind::kGrad, peer, 0, version);
  return fl::posted(fl::Op::kRecv, fl::about(h, peer, 11, 104));
}

}  // namespace

TEST_CASE("flight: the ring keeps the last N, the table what is in flight", "[flight]") {
  const fs::path dir = scratch("ring");
  start(dir, 0, 8);
  REQUIRE(fl::on());
  const fl::Ticket stuck = recv_grad(3, 16);  // from a rank that never answers
  for (std::uint64_t v = 0; v < 20; ++v) {
    const fl::Ticket t = recv_grad(2, v);
    auto h = syncopt::comm::make_header(Kind::kGrad, 2, 0, v);
    fl::done(t, &h, 104);
  }
  const fl::Ticket gone = recv_grad(1, 5);
  fl::cancelled(gone);
  REQUIRE(fl::dump("test deadline"));
  const auto l = lines(dir / "flight" / "rank-0.jsonl");
  REQUIRE(l.size() == 1 + 1 + 8);  // header, the one in flight, the ring
  CHECK(l[0]["reason"] == "test deadline");
  CHECK(l[0]["pending"] == 1);
  CHECK(l[0]["events"] == 8);
  CHECK(l[0]["recorded"] == 1 + 40 + 2);
  CHECK(l[0]["t"] == 42.0);
  // The receive posted first is still there, though 42 events came after it.
  CHECK(l[1]["pending"] == true);
  CHECK(l[1]["peer"] == 3);
  CHECK(l[1]["peer_name"] == "worker 2 (rank 3)");
  CHECK(l[1]["version"] == 16);
  // The ring, oldest first, ends with the cancel.
  CHECK(l.back()["event"] == "cancelled");
  CHECK(l.back()["peer"] == 1);
  CHECK(l[l.size() - 3]["event"] == "done");
  CHECK(l[l.size() - 3]["version"] == 19);
  // A second dump appends; the first is kept.
  fl::done(stuck);
  REQUIRE(fl::dump("second"));
  const auto l2 = lines(dir / "flight" / "rank-0.jsonl");
  REQUIRE(l2.size() == l.size() + 1 + 8);
  CHECK(l2[l.size()]["dump"] == 2);
  CHECK(l2[l.size()]["pending"] == 0);
  fl::stop();
  CHECK_FALSE(fl::on());
  CHECK(fl::posted(fl::Op::kSend, {}) == fl::kNone);
}

TEST_CASE("flight: off records nothing and dumps nothing", "[flight]") {
  const fs::path dir = scratch("off");
  start(dir, 1, 0);
  CHECK_FALSE(fl::on());
  CHECK(recv_grad(0, 1) == fl::kNone);
  CHECK_FALSE(fl::dump("x"));
  CHECK_FALSE(fs::exists(dir / "flight"));
  CHECK(fl::ending_note().empty());
}

TEST_CASE("flight: the report names what each rank waited for, and who left no dump", "[flight]") {
  const fs::path dir = scratch("report");
  // Rank 0 waits for rank 3 (stopped: no dump of its own); rank 1 is fine.
  start(dir, 0, 16);
  const fl::Ticket t = recv_grad(2, 7);
  auto h = syncopt::comm::make_header(Kind::kGrad, 2, 0, 7);
  fl::done(t, &h, 104);
  (void)recv_grad(3, 6);
  REQUIRE(fl::dump("SIGUSR2"));
  REQUIRE(fl::dump("the run failed: too few workers"));
  CHECK(fl::ending_note().find("flight/rank-*.jsonl") != std::string::npos);
  start(dir, 1, 16);
  REQUIRE(fl::dump("rank 0 ends the run with exit 69"));
  fl::stop();
  const std::string text = syncopt::metrics::format_flight(dir, "L1");
  INFO(text);
  // The dump at the signal, not the end-of-run one after it.
  CHECK(text.find("shard 0 (rank 0): dump 1 of 2 at 42.00 s (SIGUSR2)") != std::string::npos);
  CHECK(text.find("last: received GRAD bucket 0, version 7 from worker 1 (rank 2)") !=
        std::string::npos);
  CHECK(text.find("waited for GRAD bucket 0, version 6 from worker 2 (rank 3), posted") !=
        std::string::npos);
  CHECK(text.find("worker 0 (rank 1): dump 1 of 1") != std::string::npos);
  CHECK(text.find("left no dump (stopped or dead?): worker 2 (rank 3)") != std::string::npos);
  // Another launch's dumps are not this one's.
  CHECK(syncopt::metrics::format_flight(dir, "L2").empty());
  // A torn last line is said, and what came before is read.
  std::ofstream(dir / "flight" / "rank-1.jsonl", std::ios::app) << "{\"t\": 1.0, \"ev";
  CHECK(syncopt::metrics::format_flight(dir, "L1").find("torn") != std::string::npos);
  CHECK(syncopt::metrics::format_flight(scratch("none"), "L1").empty());
}
