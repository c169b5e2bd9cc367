// The worker loop (see worker.hpp and DESIGN.md §3-§4).
#include "worker/worker.hpp"

#include <algorithm>
#include <chrono>

#include "comm/mpi.hpp"
#include "comm/poll.hpp"
#include "comm/protocol.hpp"
#include "common/error.hpp"
#include "data/batch.hpp"

namespace syncopt::worker {

namespace {

using Clock = std::chrono::steady_clock;
using comm::Kind;
using comm::Message;

double since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

WorkerResult run_worker(const WorkerSetup& st) {
  const config::Config& cfg = *st.cfg;
  const train::Roles& roles = *st.roles;
  const int S = roles.shards;
  const int self_rank = roles.worker_rank(st.worker);
  const int batch = static_cast<int>(cfg.train.batch);
  data::BatchLoader loader(*st.train, batch, cfg.run.seed, st.worker, roles.workers,
                           cfg.data.augment,
                           {cfg.data.augment_max_rotate_deg, cfg.data.augment_max_zoom});

  std::vector<float> params(st.param_count), grad(st.param_count);
  std::vector<std::uint64_t> version(static_cast<std::size_t>(S), 0);
  std::vector<char> stopped(static_cast<std::size_t>(S), 0);

  std::vector<Message> replies;
  for (int s = 0; s < S; ++s) replies.emplace_back(st.slices[static_cast<std::size_t>(s)].count);
  std::vector<MPI_Request> reply_reqs(static_cast<std::size_t>(S), MPI_REQUEST_NULL);
  // Two gradient buffers per shard: a send in flight never blocks the next
  // computation, and a buffer is only rewritten once its send completed.
  std::vector<Message> outbox[2];
  std::vector<MPI_Request> out_reqs[2];
  for (auto& box : outbox) {
    for (int s = 0; s < S; ++s) box.emplace_back(st.slices[static_cast<std::size_t>(s)].count);
  }
  for (auto& r : out_reqs) r.assign(static_cast<std::size_t>(S), MPI_REQUEST_NULL);
  std::vector<MPI_Request> small_sends;
  comm::CancelOnExit cancel_receives(reply_reqs);

  auto post_replies = [&]() {
    for (int s = 0; s < S; ++s) {
      auto& m = replies[static_cast<std::size_t>(s)];
      SYNCOPT_CHECK_MPI(MPI_Irecv(m.data(), m.max_bytes(), MPI_BYTE, s, comm::kTagToWorker,
                                  st.data_comm, &reply_reqs[static_cast<std::size_t>(s)]));
    }
  };
  auto header_to = [&](comm::MsgHeader& h, Kind kind, int shard) {
    h = comm::MsgHeader{};
    h.kind = static_cast<std::uint16_t>(kind);
    h.sender = static_cast<std::uint32_t>(self_rank);
    h.shard = static_cast<std::uint32_t>(shard);
  };

  // First pull: any version will do.
  post_replies();
  std::vector<Message> pulls;
  for (int s = 0; s < S; ++s) {
    pulls.emplace_back(0);
    header_to(pulls.back().header(), Kind::kPull, s);
    pulls.back().header().param_version = comm::kAnyVersion;
  }
  for (int s = 0; s < S; ++s) {
    MPI_Request r = MPI_REQUEST_NULL;
    SYNCOPT_CHECK_MPI(MPI_Isend(pulls[static_cast<std::size_t>(s)].data(), Message::wire_bytes(0),
                                MPI_BYTE, s, comm::kTagToShard, st.data_comm, &r));
    small_sends.push_back(r);
  }

  WorkerResult result;
  comm::IdleBackoff backoff;
  std::vector<MPI_Status> statuses;
  std::uint64_t step = 0;
  for (;;) {
    // One reply from every shard: new parameters or STOP.
    const auto t_wait = Clock::now();
    int outstanding = S;
    while (outstanding > 0) {
      const auto done = comm::wait_some(reply_reqs, statuses, backoff);
      for (std::size_t j = 0; j < done.size(); ++j) {
        const int s = done[j];
        int bytes = 0;
        MPI_Get_count(&statuses[j], MPI_BYTE, &bytes);
        const auto& m = replies[static_cast<std::size_t>(s)];
        const auto& slice = st.slices[static_cast<std::size_t>(s)];
        const std::string err = comm::check_header(
            m.header(), {static_cast<std::uint32_t>(s), {Kind::kParams, Kind::kStop},
                         static_cast<std::uint32_t>(s), slice.count, bytes});
        if (!err.empty()) {
          throw InternalError("worker " + std::to_string(st.worker) + " (rank " +
                              std::to_string(self_rank) + ") rejected a " + err);
        }
        if (static_cast<Kind>(m.header().kind) == Kind::kStop) {
          stopped[static_cast<std::size_t>(s)] = 1;
        } else {
          std::copy_n(m.payload(), slice.count, params.begin() + static_cast<std::ptrdiff_t>(slice.offset));
          version[static_cast<std::size_t>(s)] = m.header().param_version;
        }
        --outstanding;
      }
    }
    result.wait_s += since(t_wait);
    if (std::all_of(stopped.begin(), stopped.end(), [](char c) { return c != 0; })) break;

    loader.next();
    const auto t_compute = Clock::now();
    const float loss = st.net->train_step(params.data(), loader.images(), loader.labels(), batch,
                                          grad.data());
    const double compute_s = since(t_compute);
    result.compute_s += compute_s;
    const double delay = st.stragglers->delay_s(st.worker, step, compute_s);
    if (delay > 0.0) {
      comm::sleep_s(delay);
      result.delay_s += delay;
    }

    const int b = static_cast<int>(step % 2);
    comm::wait_all(out_reqs[b]);
    post_replies();
    for (int s = 0; s < S; ++s) {
      auto& m = outbox[b][static_cast<std::size_t>(s)];
      const auto& slice = st.slices[static_cast<std::size_t>(s)];
      auto& h = m.header();
      header_to(h, Kind::kGrad, s);
      h.param_version = version[static_cast<std::size_t>(s)];
      h.step_seq = step;
      h.count = static_cast<std::uint32_t>(slice.count);
      h.loss = loss;
      h.compute_s = compute_s;  // pure compute, without injected delay
      std::copy_n(grad.begin() + static_cast<std::ptrdiff_t>(slice.offset), slice.count, m.payload());
      SYNCOPT_CHECK_MPI(MPI_Isend(m.data(), Message::wire_bytes(slice.count), MPI_BYTE, s,
                                  comm::kTagToShard, st.data_comm,
                                  &out_reqs[b][static_cast<std::size_t>(s)]));
    }
    ++step;
    ++result.gradients;
  }

  // Tell every shard this worker is done, then drain every send.
  std::vector<Message> byes;
  for (int s = 0; s < S; ++s) {
    byes.emplace_back(0);
    header_to(byes.back().header(), Kind::kCtrl, s);
  }
  for (int s = 0; s < S; ++s) {
    MPI_Request r = MPI_REQUEST_NULL;
    SYNCOPT_CHECK_MPI(MPI_Isend(byes[static_cast<std::size_t>(s)].data(), Message::wire_bytes(0),
                                MPI_BYTE, s, comm::kTagToShard, st.data_comm, &r));
    small_sends.push_back(r);
  }
  for (auto& r : out_reqs) comm::wait_all(r);
  comm::wait_all(small_sends);
  result.gradients = step;
  return result;
}

}  // namespace syncopt::worker
