// The MPI reducer (see reducer.hpp).
#include "comm/reducer.hpp"

#include <limits>

#include "comm/mpi.hpp"
#include "common/error.hpp"

namespace syncopt::comm {

namespace {

class MpiReducer final : public Reducer {
 public:
  explicit MpiReducer(MPI_Comm comm) : m_comm(comm) {
    SYNCOPT_CHECK_MPI(MPI_Comm_size(comm, &m_size));
  }
  std::string name() const override { return "mpi"; }
  void mean(float* buf, std::size_t count) override {
    if (count > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      throw InternalError("MpiReducer: " + std::to_string(count) +
                          " floats exceed one MPI_Allreduce's int count");
    }
    SYNCOPT_CHECK_MPI(
        MPI_Allreduce(MPI_IN_PLACE, buf, static_cast<int>(count), MPI_FLOAT, MPI_SUM, m_comm));
    const float inv = 1.0f / static_cast<float>(m_size);
    for (std::size_t i = 0; i < count; ++i) buf[i] *= inv;
  }

 private:
  MPI_Comm m_comm;
  int m_size = 1;
};

}  // namespace

std::unique_ptr<Reducer> make_mpi_reducer(MPI_Comm comm) {
  return std::make_unique<MpiReducer>(comm);
}

}  // namespace syncopt::comm
