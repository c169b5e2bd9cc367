// Waiting for a nonblocking collective without losing sight of the other
// ranks. A blocking MPI_Allreduce on a rank whose peer died or stopped
// never returns (Open MPI 4.1 has no MPI 5 fault tolerance, ULFM, to revoke
// the communicator), and says nothing; so the collectives of allreduce mode
// are started nonblocking and tested here, with a hook called every few
// milliseconds that looks at the heartbeats and throws once a peer is dead
// (docs/design.md §10). A collective cannot be cancelled: after the hook
// throws, MPI may still read and write its buffers, so the caller keeps them
// for the rest of the process.
#pragma once

#include <mpi.h>

#include <functional>

namespace syncopt::comm {

// Called while a collective waits; throws to give up the wait.
using WaitHook = std::function<void()>;

// Tests `req` until it completes, calling `on_wait` (if set) at most every
// few milliseconds meanwhile. If MPI reports an error (a peer's connection
// broke), the hook keeps being called for up to `error_grace_s`, so that
// the heartbeats can say which peer died; then the MPI error is thrown.
void wait_collective(MPI_Request& req, const WaitHook& on_wait, double error_grace_s);

}  // namespace syncopt::comm
