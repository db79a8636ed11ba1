// The CUDA backend as a test target: whether this build has it and the runtime finds a device.
// Without one (CI has the toolkit but no GPU) the CUDA checks say once that they are skipped and
// why, and ctest reports the `cuda` suite as skipped; HEARTH_REQUIRE_CUDA=1 (the lent GPU
// machine's script, bench/cuda_device.sh) makes a missing device a failure instead.
#pragma once
#include <doctest/doctest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "core/backend.h"
#ifdef HEARTH_HAVE_CUDA
#include "backends/cuda/cuda_backend.h"
#endif

namespace hearth::cuda_emu {
// The CUDA backend's own code, host side and kernels, built for the CPU emulation
// (tests/cuda_emu.h, tests/cuda_emu_*.cpp): every build runs it, a GPU or not.
std::unique_ptr<Backend> make_emulated_backend(const BackendOptions& opt);
}  // namespace hearth::cuda_emu

namespace hearth::test {

inline bool cuda_device_here() {
#ifdef HEARTH_HAVE_CUDA
  static std::string why;
  static const bool here = cuda::device_count(&why) > 0;
#else
  static const bool here = false;
  static const std::string why = "this build has no CUDA backend (needs nvcc, /usr/local/cuda)";
#endif
  static bool said = false;
  const char* v = std::getenv("HEARTH_REQUIRE_CUDA");
  if (!here && v && std::string(v) == "1")
    FAIL_CHECK("HEARTH_REQUIRE_CUDA=1 but no CUDA device: ", why);
  if (!here && !said) MESSAGE("CUDA checks skipped: no CUDA device (", why, ")");
  said = true;
  return here;
}

// cublas false: every matmul through the f32 mat-vec, quantized ones without int8 activations too
// (exact); graphs false: launches every step.
inline BackendOptions cuda_options(DType kv, bool cublas, bool graphs) {
  BackendOptions o;
  o.kv_dtype = kv;
  o.cuda.cublas = cublas;
  o.cuda.int8_dots = cublas;
  o.cuda.graphs = graphs;
  return o;
}

inline std::unique_ptr<Backend> cuda_backend(DType kv = DType::F32, bool cublas = true,
                                             bool graphs = true) {
  return create_backend("cuda", cuda_options(kv, cublas, graphs));
}

// The same, emulated on the CPU.
inline std::unique_ptr<Backend> cuda_emulated(DType kv = DType::F32, bool cublas = true,
                                              bool graphs = true) {
  return cuda_emu::make_emulated_backend(cuda_options(kv, cublas, graphs));
}

}  // namespace hearth::test
