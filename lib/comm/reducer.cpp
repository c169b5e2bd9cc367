// The MPI reducer (see reducer.hpp).
#include "comm/reducer.hpp"

#include <algorithm>
#include <limits>
#include <vector>

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
  void set_wait_hook(WaitHook hook, double error_grace_s) override {
    m_hook = std::move(hook);
    m_grace_s = error_grace_s;
  }
  void mean(float* buf, std::size_t count) override {
    if (count > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      throw InternalError("MpiReducer: " + std::to_string(count) +
                          " floats exceed one MPI_Allreduce's int count");
    }
    if (m_abandoned) throw InternalError("MpiReducer used after a reduction was given up");
    const float inv = 1.0f / static_cast<float>(m_size);
    if (!m_hook) {
      SYNCOPT_CHECK_MPI(
          MPI_Allreduce(MPI_IN_PLACE, buf, static_cast<int>(count), MPI_FLOAT, MPI_SUM, m_comm));
      for (std::size_t i = 0; i < count; ++i) buf[i] *= inv;
      return;
    }
    // The reduction runs on a buffer of ours: if the wait is given up, MPI
    // may still write into it, so it must never be freed.
    if (!m_buf) m_buf = std::make_unique<std::vector<float>>();
    m_buf->assign(buf, buf + count);
    MPI_Request req = MPI_REQUEST_NULL;
    SYNCOPT_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, m_buf->data(), static_cast<int>(count),
                                     MPI_FLOAT, MPI_SUM, m_comm, &req));
    try {
      wait_collective(req, m_hook, m_grace_s);
    } catch (...) {
      (void)m_buf.release();  // NOLINT: deliberate leak, see collective.hpp
      m_abandoned = true;
      throw;
    }
    const float* sum = m_buf->data();
    for (std::size_t i = 0; i < count; ++i) buf[i] = sum[i] * inv;
  }

 private:
  MPI_Comm m_comm;
  int m_size = 1;
  WaitHook m_hook;
  double m_grace_s = 0.0;
  std::unique_ptr<std::vector<float>> m_buf;
  bool m_abandoned = false;
};

}  // namespace

std::unique_ptr<Reducer> make_mpi_reducer(MPI_Comm comm) {
  return std::make_unique<MpiReducer>(comm);
}

}  // namespace syncopt::comm
