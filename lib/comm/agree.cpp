// Agreement on errors (see agree.hpp).
#include "comm/agree.hpp"

#include <climits>
#include <new>
#include <optional>
#include <string>

#include "comm/mpi.hpp"
#include "common/error.hpp"

namespace syncopt::comm {

void agree(MPI_Comm comm, const std::function<void()>& fn) {
  std::optional<Error> mine;
  try {
    fn();
  } catch (const AgreedError&) {
    throw;  // already agreed on by a nested agree()
  } catch (const Error& e) {
    mine.emplace(e);
  } catch (const std::bad_alloc& e) {
    mine.emplace(ExitCode::kOutOfMemory, e.what());  // OutOfMemory's says how many bytes
  }
  int rank = 0;
  SYNCOPT_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  int reporter = mine ? rank : INT_MAX;
  SYNCOPT_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &reporter, 1, MPI_INT, MPI_MIN, comm));
  if (reporter == INT_MAX) return;
  int code = mine ? static_cast<int>(mine->code()) : 0;
  SYNCOPT_CHECK_MPI(MPI_Bcast(&code, 1, MPI_INT, reporter, comm));
  // The reporter's message travels too, so that rank 0 can record the
  // outcome of an attempt that failed elsewhere (run.json).
  std::string text = rank == reporter ? std::string(mine->what()) : std::string();
  int n = static_cast<int>(text.size());
  SYNCOPT_CHECK_MPI(MPI_Bcast(&n, 1, MPI_INT, reporter, comm));
  text.resize(static_cast<std::size_t>(n));
  SYNCOPT_CHECK_MPI(MPI_Bcast(text.data(), n, MPI_CHAR, reporter, comm));
  if (rank == reporter) throw AgreedError(mine->code(), text, true);
  throw AgreedError(static_cast<ExitCode>(code), "rank " + std::to_string(reporter) + ": " + text,
                    false);
}

}  // namespace syncopt::comm
