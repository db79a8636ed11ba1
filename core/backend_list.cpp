// The backends this build has, one line each, best-first by priority when none is named. This is
// the one place in core/ that names a backend: adding one means a line here and its factory header.
#include "backends/cpu/cpu_factory.h"
#include "core/backend.h"
#ifdef HEARTH_HAVE_VULKAN
#include "backends/vulkan/vulkan_factory.h"
#endif
#ifdef HEARTH_HAVE_CUDA
#include "backends/cuda/cuda_factory.h"
#endif

namespace hearth {

const std::vector<BackendFactory>& backend_list() {
  static const std::vector<BackendFactory> list = {
      {"cpu", 10, [] { return true; }, cpu::make_cpu_backend, cpu::cpu_devices},
#ifdef HEARTH_HAVE_VULKAN
      // Below the CPU: a GPU is used only when asked for (--backend vulkan).
      {"vulkan", 5, vulkan::vulkan_available, vulkan::make_vulkan_backend, vulkan::vulkan_devices},
#endif
#ifdef HEARTH_HAVE_CUDA
      // Also only when asked for (--backend cuda).
      {"cuda", 5, cuda::cuda_available, cuda::make_cuda_backend, cuda::cuda_devices},
#endif
  };
  return list;
}

}  // namespace hearth
