// OpenBLAS sgemm on one pool thread's block: x [M, K] f32 row-major (row stride ldx), W [N, K] f32
// row-major used transposed, y [M, N] f32 (row stride ldy).
#if defined(HEARTH_HAVE_OPENBLAS)
#include <cblas.h>

#include "backends/cpu/gemm.h"

namespace hearth::cpu {

namespace {

class OpenBlasGemm : public Gemm {
 public:
  OpenBlasGemm() {
    // OpenBLAS 0.3.21 has only a process-wide thread count. The pool threads each call sgemm on
    // their own block, so OpenBLAS's own threads would only compete with them.
    openblas_set_num_threads(1);
  }
  void f32(int, int M, int64_t N, int64_t K, const float* x, int64_t ldx, const float* w, float* y,
           int64_t ldy) override {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, blasint(N), blasint(K), 1.f, x,
                blasint(ldx), w, blasint(K), 0.f, y, blasint(ldy));
  }
};

}  // namespace

std::unique_ptr<Gemm> make_openblas_gemm() {
  return std::make_unique<OpenBlasGemm>();
}

}  // namespace hearth::cpu
#endif
