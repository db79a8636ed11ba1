// The AVX2+FMA matmul body shared by matmul_{f32,f16,bf16}_avx2.cpp: W row-major [rows, k] in its
// stored type, widened 8 lanes at a time to f32 (F16 via F16C) and multiplied with f32 x by FMA.
// Included only by AVX2 files; everything is in an anonymous namespace so no code compiled with
// AVX2 flags can be picked by the linker for a baseline caller.
#pragma once
#include <immintrin.h>

#include <cstring>

#include "backends/cpu/kernels.h"

namespace hearth::cpu {
namespace {

template <DType T>
struct Widen8;

template <>
struct Widen8<DType::F32> {
  static __m256 load(const void* w, int64_t i) {
    return _mm256_loadu_ps(static_cast<const float*>(w) + i);
  }
  static float one(const void* w, int64_t i) { return static_cast<const float*>(w)[i]; }
};

template <>
struct Widen8<DType::F16> {
  static __m256 load(const void* w, int64_t i) {
    return _mm256_cvtph_ps(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i)));
  }
  static float one(const void* w, int64_t i) {
    return _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<const uint16_t*>(w)[i])));
  }
};

template <>
struct Widen8<DType::BF16> {
  static __m256 load(const void* w, int64_t i) {
    const __m128i h =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static float one(const void* w, int64_t i) {
    const uint32_t u = uint32_t(static_cast<const uint16_t*>(w)[i]) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// Software prefetch in address order, this far ahead: see matmul_avx512.h.
constexpr size_t kPrefetchAhead = 16384;
// A block reads up to 8 rows side by side, so the stream must start past the whole block or, for
// long rows (k = 6144 in a 1.7B down_proj), it would fetch what the block is already reading.
inline size_t prefetch_ahead(size_t row_bytes) {
  const size_t past_block = 8 * row_bytes + 4096;
  return past_block > kPrefetchAhead ? past_block : kPrefetchAhead;
}

// Kept by value in the kernels' loops, so the stream pointer lives in a register.
struct Prefetcher {
  const char* next;
  const char* end;
  inline void advance(size_t lines) {
    for (size_t i = 0; i < lines && next < end; ++i, next += 64) _mm_prefetch(next, _MM_HINT_T0);
  }
};

// R weight rows against NT tokens with R*NT accumulators in registers; k % 8 tails are scalar.
template <DType T, int R, int NT>
inline Prefetcher block_avx2(const uint8_t* w, int64_t k, const float* x, int64_t ldx, float* y,
                             int64_t ldy, Prefetcher pf) {
  using W = Widen8<T>;
  constexpr size_t esz = T == DType::F32 ? 4 : 2;
  // Lines consumed per two 8-column steps (prefetching on every other step).
  constexpr size_t kLines = R * 16 * esz / 64 > 0 ? R * 16 * esz / 64 : 1;
  const size_t row_bytes = size_t(k) * esz;
  __m256 acc[R][NT];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_setzero_ps();
  const int64_t k8 = k & ~int64_t(7);
  for (int64_t i = 0; i < k8; i += 8) {
    if ((i & 8) == 0) pf.advance(kLines);
    __m256 xv[NT];
#pragma GCC unroll 2
    for (int t = 0; t < NT; ++t) xv[t] = _mm256_loadu_ps(x + t * ldx + i);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
      const __m256 wv = W::load(w + r * row_bytes, i);
#pragma GCC unroll 2
      for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_fmadd_ps(wv, xv[t], acc[r][t]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int t = 0; t < NT; ++t) {
      float s = hsum8(acc[r][t]);
      for (int64_t i = k8; i < k; ++i) s += W::one(w + r * row_bytes, i) * x[t * ldx + i];
      y[t * ldy + r] = s;
    }
  return pf;
}

template <DType T, int R>
inline Prefetcher rows_avx2(const MatmulArgs& a, int64_t r, Prefetcher pf) {
  constexpr size_t esz = T == DType::F32 ? 4 : 2;
  const uint8_t* w = static_cast<const uint8_t*>(a.w) + size_t(r) * size_t(a.k) * esz;
  const Prefetcher none{nullptr, nullptr};  // later token pairs read the rows from cache
  Prefetcher out = pf;
  int t = 0;
  for (; t + 2 <= a.n_tokens; t += 2) {
    const Prefetcher q = block_avx2<T, R, 2>(
        w, a.k, a.x + t * a.ldx, a.ldx, a.y + t * a.ldy + (r - a.r0), a.ldy, t == 0 ? pf : none);
    if (t == 0) out = q;
  }
  if (t < a.n_tokens) {
    const Prefetcher q = block_avx2<T, R, 1>(
        w, a.k, a.x + t * a.ldx, a.ldx, a.y + t * a.ldy + (r - a.r0), a.ldy, t == 0 ? pf : none);
    if (t == 0) out = q;
  }
  return out;
}

template <DType T>
void matmul_avx2(const MatmulArgs& a) {
  constexpr size_t esz = T == DType::F32 ? 4 : 2;
  const char* base = static_cast<const char*>(a.w);
  const int64_t pf_rows = a.prefetch_r1 > a.r1 ? a.prefetch_r1 : a.r1;
  Prefetcher pf{base + size_t(a.r0) * size_t(a.k) * esz + prefetch_ahead(size_t(a.k) * esz),
                base + size_t(pf_rows) * size_t(a.k) * esz};
  int64_t r = a.r0;
  for (; r + 4 <= a.r1; r += 4) pf = rows_avx2<T, 4>(a, r, pf);
  for (; r < a.r1; ++r) pf = rows_avx2<T, 1>(a, r, pf);
}

}  // namespace
}  // namespace hearth::cpu
