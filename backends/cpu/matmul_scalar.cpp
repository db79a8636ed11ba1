// Reference matmul: W row-major [rows, k] (F32, F16 or BF16), x and y f32 row-major. Each weight
// row is widened once into scratch and reused for every token, so W is streamed exactly once.
#include "backends/cpu/kernels.h"

namespace hearth::cpu {

namespace {

template <DType T>
void matmul_scalar(const MatmulArgs& a) {
  const size_t esz = dtype_size(T);
  for (int64_t r = a.r0; r < a.r1; ++r) {
    const float* w;
    if constexpr (T == DType::F32) {
      w = static_cast<const float*>(a.w) + r * a.k;
    } else {
      to_f32(T, static_cast<const uint8_t*>(a.w) + size_t(r * a.k) * esz, a.scratch, size_t(a.k));
      w = a.scratch;
    }
    for (int t = 0; t < a.n_tokens; ++t) {
      const float* x = a.x + t * a.ldx;
      float s = 0.f;
      for (int64_t i = 0; i < a.k; ++i) s += w[i] * x[i];
      a.y[t * a.ldy + (r - a.r0)] = s;
    }
  }
}

}  // namespace

void fill_matmul_scalar(KernelTable& k) {
  k.matmul[type_slot(DType::F32)] = matmul_scalar<DType::F32>;
  k.matmul[type_slot(DType::F16)] = matmul_scalar<DType::F16>;
  k.matmul[type_slot(DType::BF16)] = matmul_scalar<DType::BF16>;
}

}  // namespace hearth::cpu
