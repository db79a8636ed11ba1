#include "backends/cpu/cpu_factory.h"

#include <thread>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_features.h"
#include "core/threadpool.h"

namespace hearth::cpu {

std::unique_ptr<Backend> make_cpu_backend(const BackendOptions& opt) {
  return std::make_unique<CpuBackend>(opt);
}

std::vector<std::string> cpu_devices() {
  return {"cpu: " + std::string(isa_name(detect_cpu_features().best())) + ", " +
          std::to_string(default_thread_count()) + " physical cores (" +
          std::to_string(std::max(1u, std::thread::hardware_concurrency())) + " logical CPUs)"};
}

}  // namespace hearth::cpu
