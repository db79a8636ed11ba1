#include "backends/cuda/cu_blas.h"

#include <dlfcn.h>

#include <string>
#include <type_traits>

// The exported name of a cuBLAS function: cublas_v2.h maps several to their _v2 symbols by macro.
#define HEARTH_CUBLAS_SYMBOL2(f) #f
#define HEARTH_CUBLAS_SYMBOL(f) HEARTH_CUBLAS_SYMBOL2(f)

namespace hearth::HEARTH_CUDA_NS {

Cublas open_cublas() {
  const std::string soname = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::string why = lib ? "" : dlerror();
#ifdef HEARTH_CUBLAS_DIR
  if (!lib) lib = dlopen((std::string(HEARTH_CUBLAS_DIR) + "/" + soname).c_str(), RTLD_NOW);
#endif
  if (!lib)
    fail("cuBLAS: cannot open ", soname, " (", why,
         "); install the CUDA toolkit's cuBLAS, or prefill without it: HEARTH_CUDA_CUBLAS=0");
  Cublas b;
  auto bind = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    if (!fn) fail("cuBLAS: ", soname, " has no ", name);
  };
  bind(b.create, HEARTH_CUBLAS_SYMBOL(cublasCreate));
  bind(b.destroy, HEARTH_CUBLAS_SYMBOL(cublasDestroy));
  bind(b.set_stream, HEARTH_CUBLAS_SYMBOL(cublasSetStream));
  bind(b.set_workspace, HEARTH_CUBLAS_SYMBOL(cublasSetWorkspace));
  bind(b.sgemm, HEARTH_CUBLAS_SYMBOL(cublasSgemm));
  bind(b.gemm_ex, HEARTH_CUBLAS_SYMBOL(cublasGemmEx));
  bind(b.status_string, HEARTH_CUBLAS_SYMBOL(cublasGetStatusString));
  return b;
}

}  // namespace hearth::HEARTH_CUDA_NS
