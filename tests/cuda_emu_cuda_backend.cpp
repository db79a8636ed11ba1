// backends/cuda/cuda_backend.cpp compiled for the CPU emulation (tests/cuda_emu.h), in namespace
// hearth::cuda_emu.
#include "tests/cuda_emu_prelude.h"

// After the prelude, which names the emulated backend's namespace.
#include "backends/cuda/cuda_backend.cpp"

namespace hearth::cuda_emu {

std::unique_ptr<Backend> make_emulated_backend(const BackendOptions& opt) {
  return std::make_unique<CudaBackend>(opt);
}

}  // namespace hearth::cuda_emu
