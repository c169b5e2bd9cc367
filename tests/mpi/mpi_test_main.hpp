// The main of the in-process MPI test binaries (a real shard loop runs in
// them): MPI at MPI_THREAD_MULTIPLE, as syncopt itself asks for
// (comm::MpiSession), because the shard's heartbeat thread calls MPI while
// the main thread does. Every rank's Catch2 verdict is reduced, so all
// ranks agree on pass or fail, and a run that matched no test case fails;
// within a case, agreed() reduces a verdict before Catch2 asserts it (a
// REQUIRE on one rank before a collective would leave the others waiting).
#pragma once

#include <mpi.h>

#include <catch2/catch.hpp>
#include <cstdio>

// Whether `ok` holds on every rank (collective).
inline bool agreed(bool ok) {
  int mine = ok ? 1 : 0, all = 0;
  MPI_Allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

inline int run_catch_under_mpi(int argc, char** argv) {
  int provided = 0;
  if (MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
    std::fprintf(stderr, "FAIL: MPI_Init_thread failed\n");
    return 1;
  }
  if (provided < MPI_THREAD_MULTIPLE) {
    std::fprintf(stderr,
                 "FAIL: the MPI library gives thread level %d, below MPI_THREAD_MULTIPLE (%d), "
                 "which the shard's heartbeat thread needs\n",
                 provided, MPI_THREAD_MULTIPLE);
    MPI_Finalize();
    return 1;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  Catch::Session session;
  int result = session.applyCommandLine(argc, argv);
  if (result == 0) {
    session.configData().warnings = Catch::WarnAbout::NoTests;
    result = session.run();
  }
  int worst = 0;
  MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return worst;
}
