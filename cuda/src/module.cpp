// The module's one exported symbol (see syncopt_cuda/module.hpp).
#include "syncopt_cuda/module.hpp"

extern "C" __attribute__((visibility("default"))) const syncopt::cuda::Module*
syncopt_cuda_module() {
  using namespace syncopt::cuda;
  static const Module table = [] {
    Module m;
    m.probe_devices = &probe_devices;
    m.pick_device = &pick_device;
    m.make_backend = &make_cuda_backend;
    m.make_replica = &make_cuda_replica;
    m.nccl_plan = &nccl_plan;
    m.make_nccl_reducer = &make_nccl_reducer;
    return m;
  }();
  return &table;
}
