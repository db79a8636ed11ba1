// NEON matmul: W row-major [rows, k] in F32, F16 (vcvt_f32_f16) or BF16 (shifted into f32), x and
// y f32; four rows per pass share each load of x, FMA into f32 (exact products).
#include <arm_neon.h>

#include <cstring>

#include "backends/cpu/kernels.h"

namespace hearth::cpu {

namespace {

template <DType T>
inline float32x4_t load4(const void* w, int64_t i) {
  if constexpr (T == DType::F32) {
    return vld1q_f32(static_cast<const float*>(w) + i);
  } else if constexpr (T == DType::F16) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(static_cast<const uint16_t*>(w) + i)));
  } else {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(static_cast<const uint16_t*>(w) + i), 16));
  }
}

template <DType T>
inline float load1(const void* w, int64_t i) {
  if constexpr (T == DType::F32) {
    return static_cast<const float*>(w)[i];
  } else if constexpr (T == DType::F16) {
    return vgetq_lane_f32(
        vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(static_cast<const uint16_t*>(w)[i]))), 0);
  } else {
    const uint32_t u = uint32_t(static_cast<const uint16_t*>(w)[i]) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
}

template <DType T, int R>
void rows_neon(const MatmulArgs& a, int64_t r) {
  constexpr size_t esz = T == DType::F32 ? 4 : 2;
  const uint8_t* w = static_cast<const uint8_t*>(a.w) + size_t(r) * size_t(a.k) * esz;
  const size_t row_bytes = size_t(a.k) * esz;
  const int64_t k4 = a.k & ~int64_t(3);
  for (int t = 0; t < a.n_tokens; ++t) {
    const float* x = a.x + t * a.ldx;
    float32x4_t acc[R];
    for (int i = 0; i < R; ++i) acc[i] = vdupq_n_f32(0.f);
    for (int64_t i = 0; i < k4; i += 4) {
      const float32x4_t xv = vld1q_f32(x + i);
      for (int j = 0; j < R; ++j) acc[j] = vfmaq_f32(acc[j], load4<T>(w + j * row_bytes, i), xv);
    }
    for (int j = 0; j < R; ++j) {
      float s = vaddvq_f32(acc[j]);
      for (int64_t i = k4; i < a.k; ++i) s += load1<T>(w + j * row_bytes, i) * x[i];
      a.y[t * a.ldy + (r - a.r0) + j] = s;
    }
  }
}

template <DType T>
void matmul_neon(const MatmulArgs& a) {
  int64_t r = a.r0;
  for (; r + 4 <= a.r1; r += 4) rows_neon<T, 4>(a, r);
  for (; r < a.r1; ++r) rows_neon<T, 1>(a, r);
}

}  // namespace

void fill_matmul_neon(KernelTable& k) {
  k.matmul[type_slot(DType::F32)] = matmul_neon<DType::F32>;
  k.matmul[type_slot(DType::F16)] = matmul_neon<DType::F16>;
  k.matmul[type_slot(DType::BF16)] = matmul_neon<DType::BF16>;
}

}  // namespace hearth::cpu
