// The AVX-512 matmul body shared by matmul_{f32,f16,bf16}_avx512.cpp: W row-major [rows, k] in its
// stored type, widened 16 lanes at a time to f32 and multiplied with f32 x by FMA (exact f32
// products; activations are never rounded to a narrower type). Included only by AVX-512 files;
// everything is in an anonymous namespace so no code compiled with AVX-512 flags can be picked by
// the linker for a baseline caller.
#pragma once
#include <immintrin.h>

#include "backends/cpu/kernels.h"
#include "backends/cpu/simd_avx512.h"

namespace hearth::cpu {
namespace {

template <DType T>
struct Widen16;

template <>
struct Widen16<DType::F32> {
  static __m512 load(const void* w, int64_t i) {
    return _mm512_loadu_ps(static_cast<const float*>(w) + i);
  }
  static __m512 load(const void* w, int64_t i, __mmask16 m) {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(w) + i);
  }
};

template <>
struct Widen16<DType::F16> {
  static __m512 load(const void* w, int64_t i) {
    return _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + i)));
  }
  static __m512 load(const void* w, int64_t i, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(w) + i));
  }
};

// BF16 is the top half of an f32: zero-extend each 16-bit value and shift it up.
template <>
struct Widen16<DType::BF16> {
  static __m512 widen(__m256i h) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static __m512 load(const void* w, int64_t i) {
    return widen(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + i)));
  }
  static __m512 load(const void* w, int64_t i, __mmask16 m) {
    return widen(_mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(w) + i));
  }
};

// R weight rows against NT tokens: R*NT accumulators stay in registers; each widened weight vector
// is used NT times and each x vector R times.
template <DType T, int R, int NT>
inline void block_avx512(const uint8_t* w, int64_t k, const float* x, int64_t ldx, float* y,
                         int64_t ldy) {
  using W = Widen16<T>;
  constexpr size_t esz = T == DType::F32 ? 4 : 2;
  const size_t row_bytes = size_t(k) * esz;
  __m512 acc[R][NT];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_setzero_ps();
  const int64_t k16 = k & ~int64_t(15);
  for (int64_t i = 0; i < k16; i += 16) {
    __m512 xv[NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) xv[t] = _mm512_loadu_ps(x + t * ldx + i);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 wv = W::load(w + r * row_bytes, i);
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  }
  if (k16 < k) {
    const __mmask16 m = __mmask16((1u << (k - k16)) - 1u);
    __m512 xv[NT];
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) xv[t] = _mm512_maskz_loadu_ps(m, x + t * ldx + k16);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512 wv = W::load(w + r * row_bytes, k16, m);
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) y[t * ldy + r] = hsum16(acc[r][t]);
}

// Rows [r, r + R) against every token, four tokens per pass, so the R rows are read from memory
// once and from L1/L2 for the later token groups.
template <DType T, int R>
inline void rows_avx512(const MatmulArgs& a, int64_t r) {
  constexpr size_t esz = T == DType::F32 ? 4 : 2;
  const uint8_t* w = static_cast<const uint8_t*>(a.w) + size_t(r) * size_t(a.k) * esz;
  for (int t = 0; t < a.n_tokens; t += 4) {
    const float* x = a.x + t * a.ldx;
    float* y = a.y + t * a.ldy + (r - a.r0);
    switch (a.n_tokens - t) {
      case 1: block_avx512<T, R, 1>(w, a.k, x, a.ldx, y, a.ldy); break;
      case 2: block_avx512<T, R, 2>(w, a.k, x, a.ldx, y, a.ldy); break;
      case 3: block_avx512<T, R, 3>(w, a.k, x, a.ldx, y, a.ldy); break;
      default: block_avx512<T, R, 4>(w, a.k, x, a.ldx, y, a.ldy); break;
    }
  }
}

template <DType T>
void matmul_avx512(const MatmulArgs& a) {
  int64_t r = a.r0;
  if (a.n_tokens == 1) {
    // Decode: eight independent rows hide the FMA latency and keep eight streams in flight.
    for (; r + 8 <= a.r1; r += 8) rows_avx512<T, 8>(a, r);
  }
  for (; r + 4 <= a.r1; r += 4) rows_avx512<T, 4>(a, r);
  for (; r < a.r1; ++r) rows_avx512<T, 1>(a, r);
}

}  // namespace
}  // namespace hearth::cpu
