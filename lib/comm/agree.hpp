// Agreeing on errors across ranks. A step that can fail on some ranks only
// (a file missing on one node, a config that does not fit) runs inside
// agree(): afterwards every rank knows whether any rank failed, and all of
// them throw AgreedError with the same exit code, so that no rank is left
// waiting for one that has gone and no rank needs to abort the job. The
// lowest failing rank reports the cause; the others only exit, knowing its
// message ("rank R: ...", for the records rank 0 keeps).
#pragma once

#include <mpi.h>

#include <functional>

namespace syncopt::comm {

// Runs `fn`; a syncopt::Error it throws is caught, and a collective over
// `comm` tells every rank. Errors other than syncopt::Error propagate
// unchanged (and are not agreed on: they end the job).
void agree(MPI_Comm comm, const std::function<void()>& fn);

}  // namespace syncopt::comm
