// The mean of a gradient over the ranks of a communicator, behind one
// interface: MPI_Allreduce here (the oracle), NCCL on GPUs in cuda/.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <memory>
#include <string>

namespace syncopt::comm {

class Reducer {
 public:
  virtual ~Reducer() = default;
  virtual std::string name() const = 0;
  // In place: buf [count] becomes the mean over the ranks of every rank's
  // buf. A collective: every rank calls it with the same count.
  virtual void mean(float* buf, std::size_t count) = 0;
};

// MPI_Allreduce(SUM) then a scale by 1/size, on `comm` (not owned; it must
// outlive the reducer).
std::unique_ptr<Reducer> make_mpi_reducer(MPI_Comm comm);

}  // namespace syncopt::comm
