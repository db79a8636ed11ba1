// backends/cuda/cu_top_k.cu compiled for the CPU emulation (tests/cuda_emu.h), in namespace
// hearth::cuda_emu, for tests/test_cuda_kernels.cpp.
#include "tests/cuda_emu_prelude.h"

// After the prelude, which names the emulated backend's namespace.
#include "backends/cuda/cu_top_k.cu"
