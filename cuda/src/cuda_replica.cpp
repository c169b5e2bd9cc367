// CudaReplica: a training replica whose θ, gradient, optimiser state and EMA
// live in device memory (see make_cuda_replica in syncopt_cuda/api.hpp).
// Everything runs on the network's stream, in order; the host waits only
// where it needs an answer (the loss, a reduction, a copy to the host) and
// only for a bounded time. The divergence check never waits by itself: the
// finite flag of the gradient is computed on the device behind whatever last
// changed the gradient and comes back with that change's wait (the loss
// read-back; the reduction's), so gradient_finite() answers from the host.
//
// Its checkpoint State is the host replica's, field for field (theta;
// optim: name, momentum, rms_decay, eps, weight_decay, count, mom, [ms];
// ema: decay, count, updates, avg), so a run can resume on either backend;
// restore() validates through optim::Optimizer / optim::Ema themselves.
#include <cstring>
#include <string>
#include <vector>

#include "checkpoint/parts.hpp"
#include "common/error.hpp"
#include "optim/optimizer.hpp"
#include "syncopt_cuda/api.hpp"
#include "syncopt_cuda/check.hpp"
#include "syncopt_cuda/kernels.hpp"
#include "syncopt_cuda/memory.hpp"
#include "syncopt_cuda/sync.hpp"

namespace syncopt::cuda {

namespace {

class CudaReplica final : public replica::Replica {
 public:
  CudaReplica(DeviceNetwork& net, const float* init, std::size_t count,
              const replica::ReplicaOptions& options)
      : m_net(net),
        m_options(options),
        m_count(count),
        m_rmsprop(is_rmsprop(options.optim)),
        m_use_ema(options.ema_decay > 0.0),
        m_device(activate(net.device())),
        m_stream(static_cast<cudaStream_t>(net.stream())),
        m_timeout_s(net.sync_timeout_s()),
        m_theta(count),
        m_grad(count),
        m_mom(count),
        m_ms(m_rmsprop ? count : 0),
        m_ema(m_use_ema ? count : 0),
        m_host(count),
        m_d_flag(1),
        m_h_flag(1) {
    upload(init, m_theta);
    if (m_use_ema) upload(init, m_ema);
    SYNCOPT_CHECK_CUDA(cudaMemsetAsync(m_mom.get(), 0, m_mom.nbytes(), m_stream));
    fill(m_ms.get(), m_ms.count(), 1.0f, m_stream);  // TF starts the mean square at 1
    wait("the replica's initial upload");
  }

  ~CudaReplica() override {
    try {
      (void)cudaSetDevice(m_device);
      wait("the replica's teardown");
    } catch (...) {  // a destructor never throws
    }
  }

  std::size_t count() const override { return m_count; }

  float compute_gradient(const float* images, const std::int32_t* labels, int batch) override {
    SYNCOPT_CHECK_CUDA(cudaSetDevice(m_device));
    m_finite_known = false;
    bool finite = false;
    const float loss =
        m_net.train_step_device(m_theta.get(), images, labels, batch, m_grad.get(), &finite);
    remember_finite(finite);
    return loss;
  }

  void reduce_gradient(comm::Reducer& reducer) override {
    SYNCOPT_CHECK_CUDA(cudaSetDevice(m_device));
    m_finite_known = false;
    if (m_count == 0) return;
    if (auto* d = dynamic_cast<DeviceReducer*>(&reducer); d != nullptr && d->device() == m_device) {
      // NCCL, in place, on our stream; the finite check queues behind it
      // and the reducer's one wait covers both.
      d->mean_device(m_grad.get(), m_count, m_stream, [this] { enqueue_finite_check(); });
      remember_finite(*m_h_flag.get() == 0);
      return;
    }
    // Any other reducer (MPI) averages host memory: out, reduce, in.
    download(m_grad, m_host.get(), "the gradient download for the reducer");
    reducer.mean(m_host.get(), m_count);
    SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(m_grad.get(), m_host.get(), m_grad.nbytes(),
                                       cudaMemcpyHostToDevice, m_stream));
    enqueue_finite_check();
    // m_host is reused by the next copy; the upload must have read it.
    wait("the reduced gradient's upload");
    remember_finite(*m_h_flag.get() == 0);
  }

  // Micro-batches: the sum lives in m_sum [count + 1], its last float the
  // examples (docs/design.md §3), summed by the reducer in one collective.
  float accumulate_gradient(const float* images, const std::int32_t* labels, int batch,
                            bool first) override {
    const float loss = compute_gradient(images, labels, batch);
    if (m_sum.count() != m_count + 1) m_sum = DeviceBuffer<float>(m_count + 1);
    weighted_accumulate(m_sum.get(), m_grad.get(), m_count, static_cast<float>(batch), first,
                        m_stream);
    return loss;
  }

  double reduce_gradient_sum(comm::Reducer& reducer, double examples) override {
    SYNCOPT_CHECK_CUDA(cudaSetDevice(m_device));
    m_finite_known = false;
    if (m_sum.count() != m_count + 1) m_sum = DeviceBuffer<float>(m_count + 1);
    *m_h_count.get() = static_cast<float>(examples);
    SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(m_sum.get() + m_count, m_h_count.get(), sizeof(float),
                                       cudaMemcpyHostToDevice, m_stream));
    if (auto* d = dynamic_cast<DeviceReducer*>(&reducer); d != nullptr && d->device() == m_device) {
      // NCCL, in place on our stream; the total comes back with its wait.
      d->sum_device(m_sum.get(), m_count + 1, m_stream, [this] {
        SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(m_h_count.get(), m_sum.get() + m_count, sizeof(float),
                                           cudaMemcpyDeviceToHost, m_stream));
      });
    } else {
      // Any other reducer (MPI) sums host memory: out, reduce, in.
      m_host_sum.resize(m_count + 1);
      SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(m_host_sum.data(), m_sum.get(),
                                         (m_count + 1) * sizeof(float), cudaMemcpyDeviceToHost,
                                         m_stream));
      wait("the gradient sum's download for the reducer");
      reducer.sum(m_host_sum.data(), m_host_sum.size());
      SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(m_sum.get(), m_host_sum.data(),
                                         (m_count + 1) * sizeof(float), cudaMemcpyHostToDevice,
                                         m_stream));
      *m_h_count.get() = m_host_sum.back();
    }
    const double total = *m_h_count.get();
    scaled_copy(m_sum.get(), m_count, static_cast<float>(1.0 / total), m_grad.get(), m_stream);
    enqueue_finite_check();
    // m_host_sum is read by the upload: wait before it is reused.
    wait("the reduced gradient's scaling");
    remember_finite(*m_h_flag.get() == 0);
    return total;
  }

  bool gradient_finite() const override {
    if (m_finite_known) return m_grad_finite;
    // Only when nothing computed the flag since the gradient last changed
    // (a restore): a wait of its own.
    SYNCOPT_CHECK_CUDA(cudaSetDevice(m_device));
    enqueue_finite_check();
    wait("the gradient's finiteness check");
    return *m_h_flag.get() == 0;
  }

  void apply(float lr) override {
    SYNCOPT_CHECK_CUDA(cudaSetDevice(m_device));
    const optim::OptimizerOptions& o = m_options.optim;
    const auto wd = static_cast<float>(o.weight_decay);
    const auto mu = static_cast<float>(o.momentum);
    if (m_rmsprop) {
      rmsprop_step(m_theta.get(), m_grad.get(), m_ms.get(), m_mom.get(), m_count, lr,
                   static_cast<float>(o.rms_decay), mu, static_cast<float>(o.eps), wd, m_stream);
    } else {
      sgd_step(m_theta.get(), m_grad.get(), m_mom.get(), m_count, lr, mu, wd, m_stream);
    }
    if (m_use_ema) {
      ema_update(m_ema.get(), m_theta.get(), m_count, ema_alpha(m_options.ema_decay, m_ema_updates),
                 m_stream);
      ++m_ema_updates;
    }
    // Not waited for: the next step's work queues behind it on the stream.
  }

  void copy_theta(float* out) const override { download(m_theta, out, "a copy of θ"); }
  void copy_ema(float* out) const override {
    download(m_use_ema ? m_ema : m_theta, out, "a copy of the EMA");
  }

  checkpoint::State state() const override {
    const std::vector<float> ms = m_rmsprop ? host_vector(m_ms) : std::vector<float>{};
    checkpoint::State s;
    checkpoint::put_params(
        s, host_vector(m_theta),
        optim::Optimizer::encode(m_options.optim, host_vector(m_mom), m_rmsprop ? &ms : nullptr),
        m_use_ema ? std::optional<checkpoint::State>(
                        optim::Ema::encode(m_options.ema_decay, m_ema_updates, host_vector(m_ema)))
                  : std::nullopt);
    return s;
  }

  void restore(const checkpoint::State& s) override {
    // The layout (checkpoint/parts.hpp) and optim/ check every field
    // (options, counts, lengths) before anything here changes; a failed
    // restore leaves the replica as it was.
    const checkpoint::ParamsPart p = checkpoint::get_params(s, m_count, m_use_ema, "model");
    optim::Optimizer check(m_options.optim, m_count);
    check.restore(p.optim);
    std::vector<float> zeros;
    optim::Ema ema_check(m_options.ema_decay, nullptr, 0);
    if (m_use_ema) {
      zeros.assign(m_count, 0.0f);
      ema_check = optim::Ema(m_options.ema_decay, zeros.data(), m_count);
      ema_check.restore(*p.ema);
    }
    SYNCOPT_CHECK_CUDA(cudaSetDevice(m_device));
    m_finite_known = false;
    upload(p.theta.data(), m_theta);
    upload(check.momentum_buffer().data(), m_mom);
    if (m_rmsprop) upload(check.mean_square_buffer().data(), m_ms);
    if (m_use_ema) {
      upload(ema_check.data(), m_ema);
      m_ema_updates = ema_check.updates();
    }
    wait("the restored state's upload");
  }

 private:
  static bool is_rmsprop(const optim::OptimizerOptions& o) {
    return o.name == config::OptimizerName::kRmsprop;
  }
  static int activate(int device) {
    SYNCOPT_CHECK_CUDA(cudaSetDevice(device));
    return device;
  }

  void wait(const std::string& what) const { wait_stream(m_stream, m_timeout_s, what); }

  // On the stream: m_h_flag = 1 if the gradient holds an infinity or NaN,
  // else 0, once the stream gets there.
  void enqueue_finite_check() const {
    SYNCOPT_CHECK_CUDA(cudaMemsetAsync(m_d_flag.get(), 0, sizeof(int), m_stream));
    flag_nonfinite(m_grad.get(), m_count, m_d_flag.get(), m_stream);
    SYNCOPT_CHECK_CUDA(cudaMemcpyAsync(m_h_flag.get(), m_d_flag.get(), sizeof(int),
                                       cudaMemcpyDeviceToHost, m_stream));
  }

  void remember_finite(bool finite) {
    m_grad_finite = finite;
    m_finite_known = true;
  }

  // host [count] -> dst, through the pinned buffer (which is free: every
  // use of it ends with a wait).
  void upload(const float* host, DeviceBuffer<float>& dst) {
    std::memcpy(m_host.get(), host, dst.nbytes());
    SYNCOPT_CHECK_CUDA(
        cudaMemcpyAsync(dst.get(), m_host.get(), dst.nbytes(), cudaMemcpyHostToDevice, m_stream));
    wait("an upload to the replica");
  }

  // src -> out [count] on the host, after the work queued before.
  void download(const DeviceBuffer<float>& src, float* out, const std::string& what) const {
    SYNCOPT_CHECK_CUDA(cudaSetDevice(m_device));
    SYNCOPT_CHECK_CUDA(
        cudaMemcpyAsync(m_host.get(), src.get(), src.nbytes(), cudaMemcpyDeviceToHost, m_stream));
    wait(what);
    std::memcpy(out, m_host.get(), src.nbytes());
  }

  std::vector<float> host_vector(const DeviceBuffer<float>& src) const {
    std::vector<float> v(src.count());
    download(src, v.data(), "a checkpoint copy");
    return v;
  }

  DeviceNetwork& m_net;
  replica::ReplicaOptions m_options;
  std::size_t m_count;
  bool m_rmsprop;
  bool m_use_ema;
  int m_device;
  cudaStream_t m_stream;  // the network's: compute and optimiser in one order
  double m_timeout_s;
  std::uint64_t m_ema_updates = 0;
  // Whether the current gradient is finite, when known (see the file comment).
  bool m_finite_known = false;
  bool m_grad_finite = false;
  DeviceBuffer<float> m_theta, m_grad, m_mom, m_ms, m_ema;
  PinnedBuffer<float> m_host;  // staging for every copy to / from the host
  DeviceBuffer<float> m_sum;   // micro-batches: the gradient sum, then the examples
  PinnedBuffer<float> m_h_count{1};
  std::vector<float> m_host_sum;  // the sum through an MPI reducer
  DeviceBuffer<int> m_d_flag;
  PinnedBuffer<int> m_h_flag;
};

}  // namespace

std::unique_ptr<replica::Replica> make_cuda_replica(nn::Network& net, const float* init,
                                                    std::size_t count,
                                                    const replica::ReplicaOptions& options) {
  if (auto* d = dynamic_cast<DeviceNetwork*>(&net); d != nullptr) {
    return std::make_unique<CudaReplica>(*d, init, count, options);
  }
  return replica::make_host_replica(net, init, count, options);
}

}  // namespace syncopt::cuda
