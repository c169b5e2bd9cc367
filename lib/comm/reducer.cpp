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
    reduce(buf, count, 1.0f / static_cast<float>(m_size));
  }
  void sum(float* buf, std::size_t count) override { reduce(buf, count, 1.0f); }

 private:
  // buf <- (sum over the ranks) * scale; no multiplication when scale = 1.
  void reduce(float* buf, std::size_t count, float scale) {
    if (count > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      throw InternalError("MpiReducer: " + std::to_string(count) +
                          " floats exceed one MPI_Allreduce's int count");
    }
    if (m_abandoned) throw InternalError("MpiReducer used after a reduction was given up");
    if (!m_hook) {
      SYNCOPT_CHECK_MPI(
          MPI_Allreduce(MPI_IN_PLACE, buf, static_cast<int>(count), MPI_FLOAT, MPI_SUM, m_comm));
      if (scale != 1.0f) {
        for (std::size_t i = 0; i < count; ++i) buf[i] *= scale;
      }
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
    const float* total = m_buf->data();
    if (scale == 1.0f) {
      std::copy_n(total, count, buf);
    } else {
      for (std::size_t i = 0; i < count; ++i) buf[i] = total[i] * scale;
    }
  }

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
