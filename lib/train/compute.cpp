// CPU compute (see compute.hpp).
#include "train/compute.hpp"

namespace syncopt::train {

Compute cpu_compute(int threads, nn::Precision precision) {
  Compute c;
  c.make_backend = [threads, precision](int) { return nn::make_cpu_backend(threads, precision); };
  c.make_replica = [](nn::Network& net, const float* init, std::size_t count,
                      const replica::ReplicaOptions& opt) {
    return replica::make_host_replica(net, init, count, opt);
  };
  c.make_reducer = [](MPI_Comm comm) { return comm::make_mpi_reducer(comm); };
  c.describe = [](int) { return std::string("cpu"); };
  return c;
}

}  // namespace syncopt::train
