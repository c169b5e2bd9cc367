// The mean of a gradient over the ranks of a communicator, behind one
// interface: MPI_Allreduce here (the oracle), NCCL on GPUs in cuda/.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <string>

#include "comm/collective.hpp"

namespace syncopt::comm {

class Reducer {
 public:
  virtual ~Reducer() = default;
  virtual std::string name() const = 0;
  // In place: buf [count] becomes the mean over the ranks of every rank's
  // buf. A collective: every rank calls it with the same count.
  virtual void mean(float* buf, std::size_t count) = 0;
  // In place: buf [count] becomes the sum over the ranks (the gradient sum
  // and example count of micro-batches, docs/design.md §3). A collective.
  virtual void sum(float* buf, std::size_t count) = 0;
  // While mean() waits for the other ranks, `hook` is called every few
  // milliseconds and may throw to give up (a dead rank: comm/collective.hpp);
  // `error_grace_s` as there. A reducer that watches the others by its own
  // deadline (NCCL's) may ignore it.
  virtual void set_wait_hook(WaitHook hook, double error_grace_s) {
    (void)hook;
    (void)error_grace_s;
  }
};

// MPI_Allreduce(SUM) (then, for mean, a scale by 1/size) on `comm` (not owned; it must
// outlive the reducer). With a wait hook, MPI_Iallreduce on a buffer of the
// reducer's own, which it gives up to MPI for good when the hook throws.
std::unique_ptr<Reducer> make_mpi_reducer(MPI_Comm comm);

}  // namespace syncopt::comm
