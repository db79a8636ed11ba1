// The cuBLAS functions the CUDA backend calls, opened at run time (dlopen) when a backend with
// cuBLAS prefill is created, instead of linked: linked, cuBLAS and cuBLASLt cost every process that
// loads libhearth about 215 MB of resident memory and 0.35 s of relocations at start, GPU or not
// (bench/RESULTS.md). In the tests' CPU emulation the table points at the emulated functions.
#pragma once
#include "backends/cuda/cu_check.h"

namespace hearth::HEARTH_CUDA_NS {

struct Cublas {
  decltype(&cublasCreate) create = nullptr;
  decltype(&cublasDestroy) destroy = nullptr;
  decltype(&cublasSetStream) set_stream = nullptr;
  decltype(&cublasSetWorkspace) set_workspace = nullptr;
  decltype(&cublasSgemm) sgemm = nullptr;
  // (C++ sees an overload of cublasGemmEx: the C function's type spelled out.)
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const void*, const void*, cudaDataType_t, int, const void*,
                            cudaDataType_t, int, const void*, void*, cudaDataType_t, int,
                            cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;

  void check(cublasStatus_t s, const char* what) const {
    if (s != CUBLAS_STATUS_SUCCESS) fail("cuBLAS: ", what, ": ", status_string(s));
  }
};

#ifdef HEARTH_CUDA_EMU
inline Cublas open_cublas() {
  return {&cublasCreate, &cublasDestroy, &cublasSetStream,      &cublasSetWorkspace,
          &cublasSgemm,  &cublasGemmEx,  &cublasGetStatusString};
}
#else
// cuBLAS by its soname (the dynamic loader's search path, then the toolkit's library folder the
// build found); an error naming it and the way to prefill without it if it cannot be opened. The
// library stays loaded: cuBLAS is not made to be unloaded.
Cublas open_cublas();
#endif

}  // namespace hearth::HEARTH_CUDA_NS
