// The CPU backend (oneDNN), the reference every other backend is checked
// against (see backend.hpp).
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include "common/error.hpp"
#include "nn/backend.hpp"
#include "nn/cpu_network.hpp"
#include "nn/graph.hpp"

namespace syncopt::nn {

namespace {

class CpuBackend final : public Backend {
 public:
  CpuBackend(int threads, Precision precision) : m_threads(threads), m_precision(precision) {}
  std::string name() const override { return "cpu"; }
  std::unique_ptr<Network> make_network(const ModelSpec& spec, int max_batch) override {
    return std::make_unique<cpu::CpuNetwork>(model_graph(spec), max_batch, m_threads, m_precision);
  }

 private:
  int m_threads;
  Precision m_precision;
};

// oneDNN's name of the instruction set it dispatches to on this CPU.
std::string isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx (AMX bf16 and int8, AVX-512)";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16 (AVX512-BF16, no AMX)";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni (AVX-512, no bf16 instructions)";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core (AVX-512, no bf16 instructions)";
    case dnnl::cpu_isa::avx2_vnni:
    case dnnl::cpu_isa::avx2_vnni_2:
    case dnnl::cpu_isa::avx2:
      return "avx2 (no AVX-512)";
    default:
      return "other (" + std::to_string(static_cast<int>(isa)) + ")";
  }
}

}  // namespace

std::string cpu_backend_description() {
  const dnnl_version_t* v = dnnl_version();
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch) + ", cpu isa " + isa_name(dnnl::get_effective_cpu_isa());
}

bool cpu_runs_bf16() {
  // oneDNN's ISA values are nested bit masks: a superset holds avx512_core's bits.
  const auto isa = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto avx512 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
  return (isa & avx512) == avx512;
}

std::unique_ptr<Backend> make_cpu_backend(int threads, Precision precision) {
  if (threads < 0) {
    throw ConfigError("compute.threads must be >= 0 (0 = the OpenMP default), got " +
                      std::to_string(threads));
  }
  // Set here too so that anything sized by the thread count before the
  // first step (oneDNN primitive creation) sees the same number.
  if (threads > 0) omp_set_num_threads(threads);
  if (precision == Precision::kBf16 && !cpu_runs_bf16()) {
    throw ConfigError(
        "compute.precision = \"bf16\" needs a CPU with AVX-512 (oneDNN runs bf16 "
        "with AVX512-BF16 or AMX, or emulates it on AVX-512); this one gives " +
        isa_name(dnnl::get_effective_cpu_isa()) + ": use compute.precision = \"fp32\"");
  }
  return std::make_unique<CpuBackend>(threads, precision);
}

}  // namespace syncopt::nn
