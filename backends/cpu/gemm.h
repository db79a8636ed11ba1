// Library GEMMs for prefill-sized steps (oneDNN, OpenBLAS). The backend's pool stays the only
// source of parallelism: each pool thread calls the library on its own block of weight rows, and
// the libraries are asked for one thread per call, so no second thread team competes for the cores.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

namespace hearth::cpu {

enum class GemmKind : uint8_t {
  Native,    // no library: the backend's own kernels at every size
  Dnnl,      // oneDNN f32 matmul (16-bit weights widened block by block): FP32-exact
  DnnlBf16,  // oneDNN bf16 x bf16 -> f32: activations rounded to bf16, faster where BF16 FMA is
  OpenBlas,  // OpenBLAS sgemm (16-bit weights widened block by block): FP32-exact
};

// "auto" (or empty) picks oneDNN bf16 for BF16 weights where `fast_bf16` (the CPU's bf16 dot
// products outrun its f32 FMAs: CpuFeatures::fast_bf16_dot, ISA avx512), else oneDNN f32, else
// OpenBLAS, else native. The f32 paths are exact whatever library is installed; bf16 rounds the
// activations of BF16-weight prefill steps, as llama.cpp does, for about twice the speed. Throws
// for unknown names and for libraries this build lacks.
GemmKind choose_gemm(const std::string& requested, bool fast_bf16 = false);
const char* gemm_name(GemmKind k);

class Gemm {
 public:
  virtual ~Gemm() = default;
  // y[m][n] = sum_k x[m][k] w[n][k] for m < M, n < N: x [M, K] row stride ldx, w [N, K] dense,
  // y [M, N] row stride ldy; f32. `tid` is the calling pool thread (its own cache and stream).
  virtual void f32(int tid, int M, int64_t N, int64_t K, const float* x, int64_t ldx,
                   const float* w, float* y, int64_t ldy) = 0;
  // The same with bf16 x and w, f32 y. Only for GemmKind::DnnlBf16.
  virtual void bf16(int tid, int M, int64_t N, int64_t K, const uint16_t* x, int64_t ldx,
                    const uint16_t* w, float* y, int64_t ldy);
};

// null for GemmKind::Native.
std::unique_ptr<Gemm> make_gemm(GemmKind kind, int n_threads);

}  // namespace hearth::cpu
