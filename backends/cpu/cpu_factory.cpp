#include "backends/cpu/cpu_factory.h"

#include "backends/cpu/cpu_backend.h"

namespace hearth::cpu {

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& opt) {
  return std::make_unique<CpuBackend>(opt);
}

}  // namespace hearth::cpu
