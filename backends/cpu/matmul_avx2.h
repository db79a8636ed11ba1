// The AVX2+FMA matmul body shared by matmul_{f32,f16,bf16}_avx2.cpp: W row-major [rows, k] in its
// stored type, widened 8 lanes at a time to f32 (F16 via F16C) and multiplied with f32 x by FMA;
// BF16 also from its packed copy (block_bf16_packed_avx2).
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

// BF16 from its packed copy (kPackBf16, kernels.h: a 64-byte line holds 16 rows' columns (c, c + 1)
// as bf16 pairs), as the AVX-512 kernel reads it (matmul_avx512.h, block_bf16_packed): each half
// line is 8 rows' pairs; shifting a dword left by 16 gives the even column as f32, masking off its
// low half the odd one, so a vector accumulates 8 rows' sums in column order with no reduction.
// G groups (each its own stream, prefetched kAhead weights ahead) against NT tokens; each (row,
// token) takes the same operations in the same order for any G and NT, so a batched step gives
// each sequence its own step's floats.
template <int G, int NT>
inline void block_bf16_packed_avx2(const uint16_t* w, int64_t k, const float* x, int64_t ldx,
                                   float* y, int64_t ldy) {
  constexpr int64_t kAhead = 4096;  // in weights: 8 KiB per stream
  const __m256i high = _mm256_set1_epi32(int32_t(0xFFFF0000u));
  const int64_t gs = 16 * k;  // weights per group
  __m256 acc[G][2][NT];
  for (int g = 0; g < G; ++g)
    for (int h = 0; h < 2; ++h)
      for (int t = 0; t < NT; ++t) acc[g][h][t] = _mm256_setzero_ps();
  for (int64_t c = 0; c < k; c += 2) {
    const int64_t ahead = 16 * c + kAhead;
    const uint16_t* pf = ahead < gs ? w + ahead : w + (G - 1) * gs + ahead;
    __m256 we[G][2], wo[G][2];
    for (int g = 0; g < G; ++g) {
      _mm_prefetch(reinterpret_cast<const char*>(pf + g * gs), _MM_HINT_T0);
      for (int h = 0; h < 2; ++h) {
        const __m256i v =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + g * gs + 16 * c + 16 * h));
        we[g][h] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
        wo[g][h] = _mm256_castsi256_ps(_mm256_and_si256(v, high));
      }
    }
    for (int t = 0; t < NT; ++t) {
      const __m256 xe = _mm256_set1_ps(x[t * ldx + c]), xo = _mm256_set1_ps(x[t * ldx + c + 1]);
      for (int g = 0; g < G; ++g)
        for (int h = 0; h < 2; ++h) {
          acc[g][h][t] = _mm256_fmadd_ps(we[g][h], xe, acc[g][h][t]);
          acc[g][h][t] = _mm256_fmadd_ps(wo[g][h], xo, acc[g][h][t]);
        }
    }
  }
  for (int g = 0; g < G; ++g)
    for (int h = 0; h < 2; ++h)
      for (int t = 0; t < NT; ++t) _mm256_storeu_ps(y + t * ldy + 16 * g + 8 * h, acc[g][h][t]);
}

// Tokens [t0, t0 + n) (n <= 4) against one group, as one call of exactly n.
template <int NT = 4>
inline void group_bf16_tokens_avx2(const uint16_t* w, int64_t k, const float* x, int64_t ldx, int n,
                                   float* y, int64_t ldy) {
  if constexpr (NT > 0) {
    if (n == NT) return block_bf16_packed_avx2<1, NT>(w, k, x, ldx, y, ldy);
    group_bf16_tokens_avx2<NT - 1>(w, k, x, ldx, n, y, ldy);
  }
}

// Whole packed groups [g0, g1): one token reads two groups at a time (two streams: 4 accumulators
// and 8 widened weight vectors within the 16 registers); several tokens take a group four tokens
// at a time, from cache after the first pass.
inline void rows_bf16_packed_avx2(const MatmulArgs& a, int64_t g0, int64_t g1) {
  const auto* w = static_cast<const uint16_t*>(a.w_il);
  for (int64_t r = g0; r < g1;) {
    float* y = a.y + (r - a.r0);
    if (a.n_tokens == 1 && r + 32 <= g1) {
      block_bf16_packed_avx2<2, 1>(w + r * a.k, a.k, a.x, a.ldx, y, a.ldy);
      r += 32;
      continue;
    }
    for (int t = 0; t < a.n_tokens; t += 4)
      group_bf16_tokens_avx2(w + r * a.k, a.k, a.x + t * a.ldx, a.ldx,
                             a.n_tokens - t < 4 ? a.n_tokens - t : 4, y + t * a.ldy, a.ldy);
    r += 16;
  }
}

template <DType T>
void matmul_avx2(const MatmulArgs& a) {
  constexpr size_t esz = T == DType::F32 ? 4 : 2;
  const char* base = static_cast<const char*>(a.w);
  const int64_t pf_rows = a.prefetch_r1 > a.r1 ? a.prefetch_r1 : a.r1;
  Prefetcher pf{base + size_t(a.r0) * size_t(a.k) * esz + prefetch_ahead(size_t(a.k) * esz),
                base + size_t(pf_rows) * size_t(a.k) * esz};
  int64_t r = a.r0;
  if constexpr (T == DType::BF16) {
    if (a.w_il) {
      // Whole groups from the packed copy; rows outside them (a thread's range need not start on
      // one) from w.
      const auto [g0, g1] = whole_groups(a.r0, a.r1, kPackBf16.rows);
      const Prefetcher none{nullptr, nullptr};
      for (; r < g0; ++r) rows_avx2<T, 1>(a, r, none);
      rows_bf16_packed_avx2(a, g0, g1);
      for (r = g1; r < a.r1; ++r) rows_avx2<T, 1>(a, r, none);
      return;
    }
  }
  for (; r + 4 <= a.r1; r += 4) pf = rows_avx2<T, 4>(a, r, pf);
  for (; r < a.r1; ++r) pf = rows_avx2<T, 1>(a, r, pf);
}

}  // namespace
}  // namespace hearth::cpu
