// Typed errors of the core library. lib/ never exits: it throws one of these,
// and apps/syncopt/main.cpp catches once, prints one root-cause block and ends
// every rank with the error's exit code (<sysexits.h> numbering).
#pragma once

#include <cstddef>
#include <cstdio>
#include <new>
#include <stdexcept>
#include <string>

namespace syncopt {

enum class ExitCode : int {
  kOk = 0,
  kUsage = 64,        // bad command line
  kDataFormat = 65,   // input data present but malformed
  kNoInput = 66,      // input file missing or unreadable
  kUnavailable = 69,  // the run cannot go on: too few live workers, a dead shard or evaluator
  kInternal = 70,     // a bug or a library failure
  kOutOfMemory = 71,  // an allocation failed (EX_OSERR): the message says of how many bytes
  kCantCreate = 73,   // output exists / cannot be created
  kIoError = 74,      // write failed
  kPreempted = 75,    // interrupted, may be resumed
  kConfig = 78,       // bad configuration
};

// How a run ended, as summary.json says it: a function of its exit code
// (0 completed, 75 stopped by a signal with a checkpoint, anything else
// failed), so the two can never disagree.
enum class RunStatus { kCompleted, kStopped, kFailed };
constexpr RunStatus status_of(ExitCode code) {
  return code == ExitCode::kOk          ? RunStatus::kCompleted
         : code == ExitCode::kPreempted ? RunStatus::kStopped
                                        : RunStatus::kFailed;
}
constexpr const char* status_name(RunStatus s) {
  switch (s) {
    case RunStatus::kCompleted:
      return "completed";
    case RunStatus::kStopped:
      return "stopped";
    case RunStatus::kFailed:
      return "failed";
  }
  return "failed";
}

// Base of every error syncopt throws on purpose. what() is the full,
// user-facing message: it names the file/key/rank and says what to do.
class Error : public std::runtime_error {
 public:
  Error(ExitCode code, const std::string& message) : std::runtime_error(message), m_code(code) {}
  ExitCode code() const noexcept { return m_code; }

 private:
  ExitCode m_code;
};

class UsageError : public Error {
 public:
  explicit UsageError(const std::string& m) : Error(ExitCode::kUsage, m) {}
};
class DataError : public Error {
 public:
  explicit DataError(const std::string& m) : Error(ExitCode::kDataFormat, m) {}
};
class MissingInputError : public Error {
 public:
  explicit MissingInputError(const std::string& m) : Error(ExitCode::kNoInput, m) {}
};
class InternalError : public Error {
 public:
  explicit InternalError(const std::string& m) : Error(ExitCode::kInternal, m) {}
};
class OutputError : public Error {
 public:
  OutputError(ExitCode code, const std::string& m) : Error(code, m) {}
};
// The run cannot go on without a rank that died (docs/design.md §10). Every rank
// that can still exit ends with 69; nothing aborts the others, which find
// out by themselves.
class UnavailableError : public Error {
 public:
  explicit UnavailableError(const std::string& m) : Error(ExitCode::kUnavailable, m) {}
};
class ConfigError : public Error {
 public:
  explicit ConfigError(const std::string& m) : Error(ExitCode::kConfig, m) {}
};

}  // namespace syncopt

namespace syncopt {

// An error of this rank that the ranks which need it have been told about
// (an ENDING notice, comm/liveness.hpp): they end by themselves, so this
// rank ends without aborting the job.
class AnnouncedError : public Error {
 public:
  AnnouncedError(ExitCode code, const std::string& m) : Error(code, m) {}
};

// This rank ends because another rank ended the job and reported why:
// what() is one line that says so, not a new error.
class EndedByPeerError : public Error {
 public:
  EndedByPeerError(ExitCode code, const std::string& m) : Error(code, m) {}
};

// An error every rank has agreed on through a collective, so no rank needs
// to abort the job: the rank where it happened (reporter) prints the cause,
// the others only exit with the same code.
class AgreedError : public Error {
 public:
  AgreedError(ExitCode code, const std::string& m, bool reporter)
      : Error(code, m), m_reporter(reporter) {}
  bool reporter() const noexcept { return m_reporter; }

 private:
  bool m_reporter;
};

// An allocation of `nbytes` that failed. The syncopt binary's operator new
// throws it (apps/syncopt/out_of_memory.cpp), so that the message says how
// much was asked for; it is a std::bad_alloc for every other purpose. Its
// text lives inside it: building a string when memory is out could fail too.
class OutOfMemory : public std::bad_alloc {
 public:
  explicit OutOfMemory(std::size_t nbytes) noexcept : m_nbytes(nbytes) {
    std::snprintf(m_what, sizeof(m_what),
                  "out of memory: an allocation of %zu bytes (%.2f GB) failed", nbytes,
                  static_cast<double>(nbytes) / 1e9);
  }
  const char* what() const noexcept override { return m_what; }
  std::size_t nbytes() const noexcept { return m_nbytes; }

 private:
  std::size_t m_nbytes;
  char m_what[128];
};

}  // namespace syncopt
