// CUDA runtime errors as hearth::Error, naming what was being done (cuBLAS's: cu_blas.h).
#pragma once
// The backend's namespace: hearth::cuda, or another where the tests compile these files for the
// CPU emulation beside the real ones (tests/cuda_emu_prelude.h).
#ifndef HEARTH_CUDA_NS
#define HEARTH_CUDA_NS cuda
#endif
#ifdef HEARTH_CUDA_EMU
#include "tests/cuda_emu.h"
#else
#include <cublas_v2.h>
#include <cuda_runtime.h>
// kernel<<<grid, block, 0, stream>>>, spelled so that the tests' CPU emulation can run the
// kernel files too (tests/cuda_emu.h).
#define HEARTH_LAUNCH(grid, block, stream, ...) __VA_ARGS__<<<grid, block, 0, stream>>>
#endif

#include "core/error.h"

namespace hearth::HEARTH_CUDA_NS {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail("CUDA: ", what, ": ", cudaGetErrorString(e));
}

// After a kernel launch: a bad configuration shows here, a fault at the next synchronization.
inline void launched(const char* kernel) {
  check(cudaGetLastError(), kernel);
}

inline unsigned blocks_for(int64_t n, int per_block) {
  return unsigned((n + per_block - 1) / per_block);
}

}  // namespace hearth::HEARTH_CUDA_NS
