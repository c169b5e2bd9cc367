// Agreement on errors (see agree.hpp).
#include "comm/agree.hpp"

#include <climits>
#include <optional>

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
  }
  int rank = 0;
  SYNCOPT_CHECK_MPI(MPI_Comm_rank(comm, &rank));
  int reporter = mine ? rank : INT_MAX;
  SYNCOPT_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &reporter, 1, MPI_INT, MPI_MIN, comm));
  if (reporter == INT_MAX) return;
  int code = mine ? static_cast<int>(mine->code()) : 0;
  SYNCOPT_CHECK_MPI(MPI_Bcast(&code, 1, MPI_INT, reporter, comm));
  if (rank == reporter) throw AgreedError(mine->code(), mine->what(), true);
  throw AgreedError(static_cast<ExitCode>(code),
                    mine ? mine->what() : "rank " + std::to_string(reporter) + " failed", false);
}

}  // namespace syncopt::comm
