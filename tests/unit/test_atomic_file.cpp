// Tests of lib/common/atomic_file: whole-file writes replace a file in one
// step and leave no temporary; failures (missing directory, a full disk
// simulated with RLIMIT_FSIZE, a rename onto a directory) name the path and
// the OS reason and keep the previous file.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <filesystem>
#include <string>

#include "common/atomic_file.hpp"
#include "common/error.hpp"

namespace fs = std::filesystem;
using namespace syncopt;

namespace {

class TempDir {
 public:
  TempDir() {
    static int counter = 0;
    m_path = fs::temp_directory_path() / ("syncopt_test_atomic_" + std::to_string(::getpid()) +
                                          "_" + std::to_string(counter++));
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

std::size_t count_entries(const fs::path& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

}  // namespace

TEST_CASE("write_file_atomic writes and replaces a file, leaving no temporary", "[atomic_file]") {
  TempDir dir;
  const fs::path file = dir.path() / "a.bin";
  const std::string first("hello\0world", 11);  // embedded NUL: bytes, not a C string
  write_file_atomic(file, first);
  CHECK(read_file_bytes(file) == first);
  std::string big(3 << 20, 'x');
  for (std::size_t i = 0; i < big.size(); i += 4093) big[i] = static_cast<char>(i);
  write_file_atomic(file, big);
  CHECK(read_file_bytes(file) == big);
  write_file_atomic(file, "");
  CHECK(read_file_bytes(file).empty());
  CHECK(count_entries(dir.path()) == 1);
}

TEST_CASE("write_file_atomic errors name the path and the OS reason", "[atomic_file]") {
  TempDir dir;
  const fs::path missing = dir.path() / "no_such_dir" / "x.state";
  try {
    write_file_atomic(missing, "data");
    FAIL("no error");
  } catch (const OutputError& e) {
    CHECK(e.code() == ExitCode::kIoError);
    const std::string msg = e.what();
    CHECK_THAT(msg, Catch::Contains(missing.string()));
    CHECK_THAT(msg, Catch::Contains("No such file or directory"));
    CHECK_THAT(msg, Catch::Contains("run.dir"));  // says what to do
  }

  // A rename onto a non-empty directory fails after the temporary was
  // written: it must be removed, and the directory left as it was.
  const fs::path target = dir.path() / "occupied";
  fs::create_directories(target / "inside");
  CHECK_THROWS_AS(write_file_atomic(target, "data"), OutputError);
  CHECK(fs::is_directory(target / "inside"));
  CHECK(count_entries(dir.path()) == 1);
}

TEST_CASE("a full disk keeps the previous file and removes the temporary", "[atomic_file]") {
  TempDir dir;
  const fs::path file = dir.path() / "state.bin";
  write_file_atomic(file, "previous contents");
  // In a child: RLIMIT_FSIZE makes write() fail with EFBIG past 64 KiB, the
  // same path through the code as ENOSPC, without a small file system.
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    std::signal(SIGXFSZ, SIG_IGN);  // else the kernel kills us instead of failing write()
    rlimit lim{65536, 65536};
    ::setrlimit(RLIMIT_FSIZE, &lim);
    int rc = 1;
    try {
      write_file_atomic(file, std::string(1 << 20, 'y'));
    } catch (const OutputError& e) {
      const std::string msg = e.what();
      rc = (e.code() == ExitCode::kIoError && msg.find(file.string()) != std::string::npos &&
            msg.find("File too large") != std::string::npos)
               ? 0
               : 2;
    } catch (...) {
      rc = 3;
    }
    ::_exit(rc);
  }
  int status = 0;
  REQUIRE(::waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(read_file_bytes(file) == "previous contents");
  CHECK(count_entries(dir.path()) == 1);
}

TEST_CASE("read_file_bytes: a missing file is MissingInputError naming it", "[atomic_file]") {
  TempDir dir;
  const fs::path missing = dir.path() / "nope.state";
  try {
    read_file_bytes(missing);
    FAIL("no error");
  } catch (const MissingInputError& e) {
    CHECK(e.code() == ExitCode::kNoInput);
    CHECK_THAT(std::string(e.what()), Catch::Contains(missing.string()));
  }
  CHECK_THROWS_AS(read_file_bytes(dir.path()), MissingInputError);  // a directory
  fsync_dir(dir.path());
  CHECK_THROWS_AS(fsync_dir(dir.path() / "gone"), OutputError);
  CHECK(is_atomic_temporary("a/MANIFEST.json.tmp.123"));
  CHECK_FALSE(is_atomic_temporary("a.tmp/MANIFEST.json"));
}
