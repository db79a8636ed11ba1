// AVX2+FMA matmul: W row-major [rows, k] (F32, F16 via F16C, BF16 by shifting into f32), x and y
// f32. Four weight rows per pass share each load of x; k tails fall back to scalar.
#include <immintrin.h>

#include "backends/cpu/kernels.h"

namespace hearth::cpu {

namespace {

template <DType T>
inline __m256 load8(const void* w, int64_t i) {
  if constexpr (T == DType::F32) {
    return _mm256_loadu_ps(static_cast<const float*>(w) + i);
  } else if constexpr (T == DType::F16) {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i)));
  } else {
    __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}

template <DType T>
inline float load1(const void* w, int64_t i) {
  if constexpr (T == DType::F32) return static_cast<const float*>(w)[i];
  else if constexpr (T == DType::F16) return f16_to_f32(static_cast<const uint16_t*>(w)[i]);
  else return bf16_to_f32(static_cast<const uint16_t*>(w)[i]);
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

template <DType T>
void matmul_avx2(const MatmulArgs& a) {
  const size_t esz = dtype_size(T);
  const uint8_t* wb = static_cast<const uint8_t*>(a.w);
  const int64_t k8 = a.k & ~int64_t(7);
  for (int t = 0; t < a.n_tokens; ++t) {
    const float* x = a.x + t * a.ldx;
    float* y = a.y + t * a.ldy;
    int64_t r = a.r0;
    for (; r + 4 <= a.r1; r += 4) {
      const void* w0 = wb + size_t(r * a.k) * esz;
      const void* w1 = wb + size_t((r + 1) * a.k) * esz;
      const void* w2 = wb + size_t((r + 2) * a.k) * esz;
      const void* w3 = wb + size_t((r + 3) * a.k) * esz;
      __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
      for (int64_t i = 0; i < k8; i += 8) {
        __m256 xv = _mm256_loadu_ps(x + i);
        s0 = _mm256_fmadd_ps(load8<T>(w0, i), xv, s0);
        s1 = _mm256_fmadd_ps(load8<T>(w1, i), xv, s1);
        s2 = _mm256_fmadd_ps(load8<T>(w2, i), xv, s2);
        s3 = _mm256_fmadd_ps(load8<T>(w3, i), xv, s3);
      }
      float f0 = hsum(s0), f1 = hsum(s1), f2 = hsum(s2), f3 = hsum(s3);
      for (int64_t i = k8; i < a.k; ++i) {
        f0 += load1<T>(w0, i) * x[i];
        f1 += load1<T>(w1, i) * x[i];
        f2 += load1<T>(w2, i) * x[i];
        f3 += load1<T>(w3, i) * x[i];
      }
      y[r] = f0, y[r + 1] = f1, y[r + 2] = f2, y[r + 3] = f3;
    }
    for (; r < a.r1; ++r) {
      const void* w0 = wb + size_t(r * a.k) * esz;
      __m256 s0 = _mm256_setzero_ps();
      for (int64_t i = 0; i < k8; i += 8) s0 = _mm256_fmadd_ps(load8<T>(w0, i), _mm256_loadu_ps(x + i), s0);
      float f0 = hsum(s0);
      for (int64_t i = k8; i < a.k; ++i) f0 += load1<T>(w0, i) * x[i];
      y[r] = f0;
    }
  }
}

}  // namespace

void fill_kernels_avx2(KernelTable& k) {
  k.matmul[weight_slot(DType::F32)] = matmul_avx2<DType::F32>;
  k.matmul[weight_slot(DType::F16)] = matmul_avx2<DType::F16>;
  k.matmul[weight_slot(DType::BF16)] = matmul_avx2<DType::BF16>;
}

}  // namespace hearth::cpu
