// Tests of lib/checkpoint: save/commit/load round trips, every kind of
// damage found and named (checksum, size, manifest, missing part, missing or
// garbled `latest`), housekeeping (stale temporaries, prune), and the
// invariant of the format: a process SIGKILLed at any moment of a save
// leaves a `latest` that loads and verifies.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "checkpoint/checkpoint.hpp"
#include "common/atomic_file.hpp"
#include "common/error.hpp"

namespace fs = std::filesystem;
using namespace syncopt;
using namespace syncopt::checkpoint;

namespace {

class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    m_path = fs::temp_directory_path() /
             ("syncopt_test_ckpt_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(m_path);
    fs::create_directories(m_path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(m_path, ec);
  }
  const fs::path& path() const { return m_path; }

 private:
  fs::path m_path;
};

// A part whose every byte follows from (step, part, count), so a loaded
// checkpoint can be checked against what the saver must have written.
std::vector<float> part_data(std::uint64_t step, const std::string& part, std::size_t count) {
  std::mt19937_64 rng(step * 1000003ULL + std::hash<std::string>{}(part));
  std::vector<float> v(count);
  for (auto& x : v) x = static_cast<float>(rng() >> 40);
  return v;
}

State make_part(std::uint64_t step, const std::string& part, std::size_t count = 100) {
  State s;
  s.put("step", step);
  s.put("part", part);
  s.put("data", part_data(step, part, count));
  State inner;
  inner.put("epoch", std::int64_t{7});
  s.put_child("sampler", inner);
  return s;
}

const std::vector<std::string> kParts = {"shard0", "shard1", "worker0"};

void save(const fs::path& run, std::uint64_t step, std::size_t count = 100) {
  CheckpointWriter w(run, step);
  for (const auto& p : kParts) w.add(p, make_part(step, p, count));
  w.commit();
}

// Checks a loaded checkpoint holds exactly what save() wrote for its step.
bool holds_saved_data(const Checkpoint& c) {
  if (c.parts.size() != kParts.size()) return false;
  for (const auto& name : kParts) {
    const State& s = c.part(name);
    const auto& data = s.get<std::vector<float>>("data");
    if (s.get<std::uint64_t>("step") != c.step || s.get<std::string>("part") != name ||
        data != part_data(c.step, name, data.size()))
      return false;
  }
  return true;
}

template <class E>
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "(no error of the expected type)";
}

void flip_byte(const fs::path& file, std::size_t at) {
  std::string bytes = read_file_bytes(file);
  bytes[at] = static_cast<char>(bytes[at] ^ 0x01);
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
}

void truncate_file(const fs::path& file, std::size_t size) {
  std::string bytes = read_file_bytes(file);
  bytes.resize(size);
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
}

}  // namespace

TEST_CASE("checkpoint: save, commit and load round trip", "[checkpoint]") {
  TempDir dir;
  const fs::path run = dir.path() / "run";
  save(run, 100);
  CHECK(read_file_bytes(checkpoints_dir(run) / "latest") == "100\n");
  CHECK(latest_step(run) == 100u);

  const Checkpoint c = load_latest(run);
  CHECK(c.step == 100);
  CHECK(c.dir == step_dir(run, 100));
  CHECK(holds_saved_data(c));
  CHECK(c.part("shard1") == make_part(100, "shard1"));
  CHECK(c.part("shard1").child("sampler").path() == "shard1.sampler");

  // The manifest lists every file with its real size and CRC-32.
  const auto manifest = nlohmann::json::parse(read_file_bytes(c.dir / "MANIFEST.json"));
  CHECK(manifest["format_version"] == kFormatVersion);
  CHECK(manifest["step"] == 100);
  CHECK(manifest["created_utc"].get<std::string>().size() == 20);
  REQUIRE(manifest["files"].size() == 3);
  for (const auto& f : manifest["files"]) {
    CHECK(f["nbytes"] == fs::file_size(c.dir / f["file"].get<std::string>()));
  }
  CHECK(c.manifest.files[0].crc32 == manifest["files"][0]["crc32"]);

  // A later save moves `latest`; the earlier one stays loadable by step.
  save(run, 200);
  CHECK(load_latest(run).step == 200);
  CHECK(holds_saved_data(load_step(run, 100)));
  CHECK(committed_steps(run) == std::vector<std::uint64_t>{100, 200});
}

TEST_CASE("checkpoint: ranks write their own parts, one commits", "[checkpoint]") {
  TempDir dir;
  const fs::path run = dir.path() / "run";
  write_part(run, 5, "shard0", make_part(5, "shard0"));    // rank 0
  write_part(run, 5, "worker1", make_part(5, "worker1"));  // rank 2
  CHECK_FALSE(latest_step(run).has_value());               // nothing published before commit
  CheckpointWriter w(run, 5);                              // rank 1, which commits
  w.add("shard1", make_part(5, "shard1"));
  const Manifest m = w.commit({"shard0", "worker1"});
  CHECK(m.files.size() == 3);

  // A rank can load (and checksum) only its own part.
  const Checkpoint mine = load_latest(run, {"worker1"});
  REQUIRE(mine.parts.size() == 1);
  CHECK(mine.part("worker1") == make_part(5, "worker1"));
  CHECK_THAT(error_of<DataError>([&] { (void)mine.part("shard0"); }),
             Catch::Contains("no part 'shard0'"));
  CHECK_THAT(error_of<DataError>([&] { (void)load_latest(run, {"worker9"}); }),
             Catch::Contains("no part 'worker9'") && Catch::Contains("shard1, shard0, worker1"));

  // Misuse: a part name that is not a plain file name; a commit naming a
  // part nobody wrote (nothing is published: `latest` stays at 5).
  CHECK_THROWS_AS(write_part(run, 6, "../x", make_part(6, "x")), InternalError);
  CHECK_THROWS_AS(write_part(run, 6, "MANIFEST.json", make_part(6, "x")), InternalError);
  write_part(run, 6, "shard0", make_part(6, "shard0"));
  try {
    commit(run, 6, {"shard0", "shard1"});
    FAIL("commit of a missing part");
  } catch (const OutputError& e) {
    CHECK(e.code() == ExitCode::kIoError);
    CHECK_THAT(std::string(e.what()), Catch::Contains("part 'shard1' was not written"));
  }
  CHECK(latest_step(run) == 5u);
  CHECK_FALSE(fs::exists(step_dir(run, 6) / "MANIFEST.json"));
}

TEST_CASE("checkpoint: the step `latest` names is never rewritten", "[checkpoint]") {
  TempDir dir;
  const fs::path run = dir.path() / "run";
  save(run, 3);
  try {
    write_part(run, 3, "shard0", make_part(4, "shard0"));
    FAIL("rewrote the latest checkpoint");
  } catch (const OutputError& e) {
    CHECK(e.code() == ExitCode::kCantCreate);
    CHECK_THAT(std::string(e.what()), Catch::Contains("never rewritten"));
  }
  CHECK(holds_saved_data(load_latest(run)));

  // A step committed but never published (killed before `latest` moved) is
  // uncommitted as soon as a new save of that step starts writing into it.
  save(run, 4);
  write_file_atomic(checkpoints_dir(run) / "latest", "3\n");
  write_part(run, 4, "shard0", make_part(40, "shard0"));
  CHECK(committed_steps(run) == std::vector<std::uint64_t>{3});
  CHECK_THAT(error_of<DataError>([&] { (void)load_step(run, 4); }),
             Catch::Contains("MANIFEST.json' is missing"));
}

TEST_CASE("checkpoint: damage is a DataError naming the file and the mismatch", "[checkpoint]") {
  TempDir dir;
  const fs::path run = dir.path() / "run";
  save(run, 10);
  const fs::path part = step_dir(run, 10) / "shard1.state";
  const fs::path manifest = step_dir(run, 10) / "MANIFEST.json";
  const std::string good_part = read_file_bytes(part);
  const std::string good_manifest = read_file_bytes(manifest);
  const auto restore = [&] {
    write_file_atomic(part, good_part);
    write_file_atomic(manifest, good_manifest);
    REQUIRE(holds_saved_data(load_latest(run)));
  };
  const auto load_error = [&] {
    try {
      (void)load_latest(run);
    } catch (const DataError& e) {
      CHECK(e.code() == ExitCode::kDataFormat);
      return std::string(e.what());
    }
    return std::string("(no DataError)");
  };

  SECTION("a flipped byte in a part") {
    flip_byte(part, good_part.size() / 2);
    const std::string msg = load_error();
    CHECK_THAT(msg, Catch::Contains(part.string()) && Catch::Contains("checksum mismatch") &&
                        Catch::Contains("expected crc32 0x") && Catch::Contains("found 0x"));
    CHECK_THAT(msg, Catch::Contains("run.resume = false"));  // what to do
    // A rank that loads another part still sees the size of this one only.
    CHECK(load_latest(run, {"shard0"}).parts.size() == 1);
    restore();
  }
  SECTION("a truncated part") {
    truncate_file(part, good_part.size() - 3);
    CHECK_THAT(
        load_error(),
        Catch::Contains(part.string()) &&
            Catch::Contains("size mismatch: expected " + std::to_string(good_part.size()) +
                            " bytes (manifest), found " + std::to_string(good_part.size() - 3)));
    // Also seen by a rank that only loads another part.
    CHECK_THROWS_AS(load_latest(run, {"shard0"}), DataError);
    restore();
  }
  SECTION("a missing part") {
    fs::remove(part);
    CHECK_THAT(load_error(), Catch::Contains(part.string()) && Catch::Contains("is missing"));
    restore();
  }
  SECTION("a truncated manifest") {
    truncate_file(manifest, good_manifest.size() / 2);
    CHECK_THAT(load_error(),
               Catch::Contains(manifest.string()) && Catch::Contains("not valid JSON"));
    restore();
  }
  SECTION("a manifest with a wrong field") {
    auto j = nlohmann::json::parse(good_manifest);
    j["files"][1]["nbytes"] = "many";
    write_file_atomic(manifest, j.dump());
    CHECK_THAT(load_error(), Catch::Contains("\"nbytes\" has the wrong type"));
    j = nlohmann::json::parse(good_manifest);
    j["format_version"] = 99;
    write_file_atomic(manifest, j.dump());
    CHECK_THAT(load_error(), Catch::Contains("format version 99"));
    j = nlohmann::json::parse(good_manifest);
    j["files"][0]["file"] = "../../../etc/passwd";
    write_file_atomic(manifest, j.dump());
    CHECK_THAT(load_error(), Catch::Contains("malformed"));
    restore();
  }
  SECTION("a missing manifest, or `latest` naming nothing or garbage") {
    fs::remove(manifest);
    CHECK_THAT(load_error(), Catch::Contains(manifest.string()) && Catch::Contains("missing"));
    write_file_atomic(checkpoints_dir(run) / "latest", "11\n");
    CHECK_THAT(load_error(), Catch::Contains("names step 11") && Catch::Contains("does not exist"));
    write_file_atomic(checkpoints_dir(run) / "latest", "ten\n");
    CHECK_THAT(load_error(), Catch::Contains("holds \"ten\", expected a step number"));
    write_file_atomic(checkpoints_dir(run) / "latest", "10\n");
    restore();
  }
}

TEST_CASE("checkpoint: no checkpoint at all is MissingInputError", "[checkpoint]") {
  TempDir dir;
  const fs::path run = dir.path() / "run";
  const auto check = [&](const std::string& why) {
    try {
      (void)load_latest(run);
      FAIL("loaded a checkpoint from nothing");
    } catch (const MissingInputError& e) {
      CHECK(e.code() == ExitCode::kNoInput);
      const std::string msg = e.what();
      CHECK_THAT(msg, Catch::Contains("nothing to resume") && Catch::Contains(why) &&
                          Catch::Contains("run.resume = false"));
    }
  };
  check("run directory '" + run.string() + "' does not exist");
  // A save that never committed leaves no `latest` either.
  write_part(run, 1, "shard0", make_part(1, "shard0"));
  check("latest' does not exist");
  CHECK_FALSE(latest_step(run).has_value());
  CHECK(committed_steps(run).empty());
}

TEST_CASE("checkpoint: remove_stale_temporaries clears what a killed save left", "[checkpoint]") {
  TempDir dir;
  const fs::path run = dir.path() / "run";
  save(run, 5);
  const fs::path ckpt = checkpoints_dir(run);
  write_file_atomic(ckpt / "latest.tmp.4242", "6\n");
  write_file_atomic(step_dir(run, 5) / "shard0.state.tmp.17", "half");
  write_part(run, 6, "shard0", make_part(6, "shard0"));  // never committed
  write_file_atomic(step_dir(run, 6) / "shard1.state.tmp.9", "half");
  fs::create_directories(ckpt / "notes");  // not ours: left alone
  write_file_atomic(ckpt / "notes" / "x.tmp.1", "");

  auto removed = remove_stale_temporaries(run);
  std::sort(removed.begin(), removed.end());
  std::vector<fs::path> expected = {ckpt / "latest.tmp.4242",
                                    step_dir(run, 5) / "shard0.state.tmp.17", step_dir(run, 6)};
  std::sort(expected.begin(), expected.end());
  CHECK(removed == expected);
  CHECK_FALSE(fs::exists(step_dir(run, 6)));
  CHECK(fs::exists(ckpt / "notes" / "x.tmp.1"));
  CHECK(holds_saved_data(load_latest(run)));
  CHECK(remove_stale_temporaries(run).empty());
  CHECK(remove_stale_temporaries(dir.path() / "no_run").empty());
}

TEST_CASE("checkpoint: prune keeps the newest and never the latest's step", "[checkpoint]") {
  TempDir dir;
  const fs::path run = dir.path() / "run";
  for (std::uint64_t s = 1; s <= 5; ++s) save(run, s);
  CHECK(prune(run, 2) == std::vector<std::uint64_t>{1, 2, 3});
  CHECK(committed_steps(run) == std::vector<std::uint64_t>{4, 5});
  CHECK(prune(run, 2).empty());

  // `latest` at an older step (a run resumed from it): kept whatever `keep`.
  for (std::uint64_t s = 6; s <= 8; ++s) save(run, s);
  write_file_atomic(checkpoints_dir(run) / "latest", "4\n");
  CHECK(prune(run, 1) == std::vector<std::uint64_t>{5, 6, 7});
  CHECK(committed_steps(run) == std::vector<std::uint64_t>{4, 8});
  CHECK(prune(run, 0) == std::vector<std::uint64_t>{8});
  CHECK(holds_saved_data(load_latest(run)));
  CHECK(load_latest(run).step == 4);
}

TEST_CASE("checkpoint: a save SIGKILLed at any moment leaves a latest that loads",
          "[checkpoint][kill]") {
  TempDir dir;
  const fs::path run = dir.path() / "run";
  std::mt19937_64 rng(20240611);
  std::uint64_t last = 0;
  // The windows a wrong order opens (e.g. `latest` before the manifest) are
  // about a tenth of a small save, so many short rounds are needed to hit
  // one for sure: 100 rounds, one in ten with 4 MiB parts (the kill lands
  // mostly in part writes), the rest with tiny parts (it lands mostly in
  // the manifest, `latest`, prune and their fsyncs).
  for (int round = 0; round < 100; ++round) {
    const bool big = round % 10 == 0;
    const std::size_t count = big ? (std::size_t{1} << 20) : 16;
    int pipe_fds[2];
    REQUIRE(::pipe(pipe_fds) == 0);
    const pid_t pid = ::fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      // The saver, as a run would do it: clean up, resume after `latest`,
      // save and prune until killed; one byte down the pipe per commit.
      ::close(pipe_fds[0]);
      try {
        remove_stale_temporaries(run);
        for (std::uint64_t step = latest_step(run).value_or(0) + 1;; ++step) {
          save(run, step, count);
          prune(run, 2);
          if (::write(pipe_fds[1], "c", 1) != 1) break;
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "saver failed: %s\n", e.what());
      }
      ::_exit(3);
    }
    ::close(pipe_fds[1]);
    // Kill at a random moment after the round's first commit, so the kill
    // lands inside a later save (fsync times vary too much on a shared disk
    // to aim from the fork), and every round moves `latest`.
    pollfd pfd{pipe_fds[0], POLLIN, 0};
    const bool committed = ::poll(&pfd, 1, 20000) == 1;
    const auto delay_us = static_cast<useconds_t>(rng() % (big ? 120000 : 15000));
    if (committed) ::usleep(delay_us);
    ::kill(pid, SIGKILL);
    int status = 0;
    REQUIRE(::waitpid(pid, &status, 0) == pid);
    ::close(pipe_fds[0]);
    INFO("round " << round << ", killed " << delay_us << " us after a commit");
    REQUIRE(committed);            // else the saver failed or hung (see stderr)
    REQUIRE(WIFSIGNALED(status));  // the saver only stops when killed

    std::optional<std::uint64_t> step;
    REQUIRE_NOTHROW(step = latest_step(run));
    REQUIRE(step.has_value());
    CHECK(*step > last);
    last = *step;
    Checkpoint c;
    REQUIRE_NOTHROW(c = load_latest(run));
    CHECK(c.step == *step);
    CHECK(holds_saved_data(c));
  }
}
