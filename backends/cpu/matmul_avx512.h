// The AVX-512 matmul body shared by matmul_{f32,f16,bf16}_avx512.cpp: W row-major [rows, k] in its
// stored type (BF16 also as its kPackBf16 copy: 16 rows' column pairs per 64-byte line), widened
// to f32 and multiplied with f32 x by FMA (exact f32 products; activations are never rounded to a
// narrower type). Included only by AVX-512 files;
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

// Software prefetch runs this far ahead of the rows being read, in address order. The R rows of a
// block are R short streams that restart every block, which the hardware prefetchers follow
// poorly; one linear stream over the matrix keeps enough lines in flight (measured: decode
// matvec from about 60% to about 80% of a plain read's bandwidth). Into L1 (T0): on Zen 5 the
// 0.6B BF16 matvecs read at 0.82 of a plain read with it, 0.77 with T1.
constexpr size_t kPrefetchAhead = 16384;
// A block reads up to 8 rows side by side, so the stream must start past the whole block or, for
// long rows (k = 6144 in a 1.7B down_proj), it would fetch what the block is already reading.
inline size_t prefetch_ahead(size_t row_bytes) {
  const size_t past_block = 8 * row_bytes + 4096;
  return past_block > kPrefetchAhead ? past_block : kPrefetchAhead;
}

// Issues prefetches for the next `bytes` of the linear stream, stopping at `end`.
// Kept by value in the kernels' loops, so the stream pointer lives in a register.
struct Prefetcher {
  const char* next;
  const char* end;
  inline void advance(size_t lines) {
    for (size_t i = 0; i < lines && next < end; ++i, next += 64) _mm_prefetch(next, _MM_HINT_T0);
  }
};

// R weight rows against NT tokens: R*NT accumulators stay in registers; each widened weight vector
// is used NT times and each x vector R times.
template <DType T, int R, int NT>
inline Prefetcher block_avx512(const uint8_t* w, int64_t k, const float* x, int64_t ldx, float* y,
                               int64_t ldy, Prefetcher pf) {
  using W = Widen16<T>;
  constexpr size_t esz = T == DType::F32 ? 4 : 2;
  // Lines of weights consumed per 16-column step, at least one so the stream keeps pace.
  constexpr size_t kLines = R * 16 * esz / 64 > 0 ? R * 16 * esz / 64 : 1;
  const size_t row_bytes = size_t(k) * esz;
  __m512 acc[R][NT];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_setzero_ps();
  const int64_t k16 = k & ~int64_t(15);
  for (int64_t i = 0; i < k16; i += 16) {
    __m512 xv[NT];
    pf.advance(kLines);
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
  return pf;
}

// Rows [r, r + R) against every token, four tokens per pass, so the R rows are read from memory
// once and from L1/L2 for the later token groups.
template <DType T, int R>
inline Prefetcher rows_avx512(const MatmulArgs& a, int64_t r, Prefetcher pf) {
  constexpr size_t esz = T == DType::F32 ? 4 : 2;
  const uint8_t* w = static_cast<const uint8_t*>(a.w) + size_t(r) * size_t(a.k) * esz;
  for (int t = 0; t < a.n_tokens; t += 4) {
    const float* x = a.x + t * a.ldx;
    float* y = a.y + t * a.ldy + (r - a.r0);
    // Later token groups read the rows from cache; only the first one drives the prefetch.
    const Prefetcher p = t == 0 ? pf : Prefetcher{nullptr, nullptr};
    Prefetcher q;
    switch (a.n_tokens - t) {
      case 1:
        q = block_avx512<T, R, 1>(w, a.k, x, a.ldx, y, a.ldy, p);
        break;
      case 2:
        q = block_avx512<T, R, 2>(w, a.k, x, a.ldx, y, a.ldy, p);
        break;
      case 3:
        q = block_avx512<T, R, 3>(w, a.k, x, a.ldx, y, a.ldy, p);
        break;
      default:
        q = block_avx512<T, R, 4>(w, a.k, x, a.ldx, y, a.ldy, p);
        break;
    }
    if (t == 0) pf = q;
  }
  return pf;
}

// BF16 against several tokens, where FMA throughput rather than memory sets the pace. A 64-byte
// load holds 32 weights as 16 pairs: shifting each 32-bit lane left by 16 gives the even weights as
// f32, masking off the low half gives the odd ones, two ALU operations per 32 weights instead of
// four. x is deinterleaved to match once per call: per 32 values, the even ones then the odd ones.
inline void deinterleave_pairs(const float* x, int64_t ldx, int n_tokens, int64_t k, float* xp) {
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  for (int t = 0; t < n_tokens; ++t)
    for (int64_t i = 0; i < k; i += 32) {
      const __m512 a = _mm512_loadu_ps(x + t * ldx + i), b = _mm512_loadu_ps(x + t * ldx + i + 16);
      _mm512_storeu_ps(xp + t * k + i, _mm512_permutex2var_ps(a, even, b));
      _mm512_storeu_ps(xp + t * k + i + 16, _mm512_permutex2var_ps(a, odd, b));
    }
}

template <int R, int NT>
inline Prefetcher block_bf16_pairs(const uint16_t* w, int64_t k, const float* xp, float* y,
                                   int64_t ldy, Prefetcher pf) {
  constexpr size_t kLines = R;  // R rows x 64 bytes per 32-column step
  const __m512i high = _mm512_set1_epi32(int32_t(0xFFFF0000u));
  __m512 acc[R][NT];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_setzero_ps();
  for (int64_t i = 0; i < k; i += 32) {
    __m512 xe[NT], xo[NT];
    pf.advance(kLines);
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      xe[t] = _mm512_loadu_ps(xp + t * k + i);
      xo[t] = _mm512_loadu_ps(xp + t * k + i + 16);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const __m512i v = _mm512_loadu_si512(w + r * k + i);
      const __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
      const __m512 wo = _mm512_castsi512_ps(_mm512_and_si512(v, high));
#pragma GCC unroll 4
      for (int t = 0; t < NT; ++t) {
        acc[r][t] = _mm512_fmadd_ps(we, xe[t], acc[r][t]);
        acc[r][t] = _mm512_fmadd_ps(wo, xo[t], acc[r][t]);
      }
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) y[t * ldy + r] = hsum16(acc[r][t]);
  return pf;
}

// Packed rows (kPackBf16): G groups of 16 rows side by side against NT tokens. Each 64-byte line
// holds 16 rows' weights for columns (c, c + 1); widened like the pairs kernel's, they multiply
// broadcasts of x[c] and x[c + 1], so a vector accumulates 16 rows' sums in column order and
// needs no reduction. Each line serves NT tokens from registers, and the x of a token serves 16 G
// rows, where the pairs kernel reloads x per 4 rows and reduces 16 lanes per row and token (it
// reached about half this kernel's FLOP rate on 8 tokens, bench/RESULTS.md). Each group is a
// stream, prefetched kAhead weights ahead; past its end the prefetch runs on into the same stream
// of the next G groups.
template <int G, int NT>
inline void block_bf16_packed(const uint16_t* w, int64_t k, const float* x, int64_t ldx, float* y,
                              int64_t ldy) {
  constexpr int64_t kAhead = 4096;  // in weights: 8 KiB per stream
  const __m512i high = _mm512_set1_epi32(int32_t(0xFFFF0000u));
  const int64_t gs = 16 * k;  // weights per group
  __m512 acc[G][NT];
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) acc[g][t] = _mm512_setzero_ps();
  for (int64_t c = 0; c < k; c += 2) {
    const int64_t ahead = 16 * c + kAhead;
    const uint16_t* pf = ahead < gs ? w + ahead : w + (G - 1) * gs + ahead;
    __m512 we[G], wo[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      _mm_prefetch(reinterpret_cast<const char*>(pf + g * gs), _MM_HINT_T0);
      const __m512i v = _mm512_loadu_si512(w + g * gs + 16 * c);
      we[g] = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
      wo[g] = _mm512_castsi512_ps(_mm512_and_si512(v, high));
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const __m512 xe = _mm512_set1_ps(x[t * ldx + c]), xo = _mm512_set1_ps(x[t * ldx + c + 1]);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        acc[g][t] = _mm512_fmadd_ps(we[g], xe, acc[g][t]);
        acc[g][t] = _mm512_fmadd_ps(wo[g], xo, acc[g][t]);
      }
    }
  }
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) _mm512_storeu_ps(y + t * ldy + 16 * g, acc[g][t]);
}

// block_bf16_packed<G, nt> for nt in 1..NT.
template <int G, int NT = 8>
inline void block_bf16_packed_any(int nt, const uint16_t* w, int64_t k, const float* x, int64_t ldx,
                                  float* y, int64_t ldy) {
  if constexpr (NT > 1)
    if (nt < NT) return block_bf16_packed_any<G, NT - 1>(nt, w, k, x, ldx, y, ldy);
  block_bf16_packed<G, NT>(w, k, x, ldx, y, ldy);
}

// Whole packed groups [g0, g1): pairs of groups, eight tokens at a time (the later token groups
// read the pair from L1).
inline void rows_bf16_packed(const MatmulArgs& a, int64_t g0, int64_t g1) {
  const auto* w = static_cast<const uint16_t*>(a.w_il);
  for (int64_t r = g0; r < g1;) {
    const bool two = r + 32 <= g1;
    for (int t = 0; t < a.n_tokens; t += 8) {
      const int nt = a.n_tokens - t < 8 ? a.n_tokens - t : 8;
      float* y = a.y + t * a.ldy + (r - a.r0);
      if (two)
        block_bf16_packed_any<2>(nt, w + r * a.k, a.k, a.x + t * a.ldx, a.ldx, y, a.ldy);
      else
        block_bf16_packed_any<1>(nt, w + r * a.k, a.k, a.x + t * a.ldx, a.ldx, y, a.ldy);
    }
    r += two ? 32 : 16;
  }
}

template <int R>
inline Prefetcher rows_bf16_pairs(const MatmulArgs& a, const float* xp, int64_t r, Prefetcher pf) {
  const uint16_t* w = static_cast<const uint16_t*>(a.w) + r * a.k;
  for (int t = 0; t < a.n_tokens; t += 4) {
    const float* x = xp + t * a.k;
    float* y = a.y + t * a.ldy + (r - a.r0);
    const Prefetcher p = t == 0 ? pf : Prefetcher{nullptr, nullptr};
    Prefetcher q;
    switch (a.n_tokens - t) {
      case 1:
        q = block_bf16_pairs<R, 1>(w, a.k, x, y, a.ldy, p);
        break;
      case 2:
        q = block_bf16_pairs<R, 2>(w, a.k, x, y, a.ldy, p);
        break;
      case 3:
        q = block_bf16_pairs<R, 3>(w, a.k, x, y, a.ldy, p);
        break;
      default:
        q = block_bf16_pairs<R, 4>(w, a.k, x, y, a.ldy, p);
        break;
    }
    if (t == 0) pf = q;
  }
  return pf;
}

template <DType T>
void matmul_avx512(const MatmulArgs& a) {
  constexpr size_t esz = T == DType::F32 ? 4 : 2;
  const char* base = static_cast<const char*>(a.w);
  const int64_t pf_rows = a.prefetch_r1 > a.r1 ? a.prefetch_r1 : a.r1;
  Prefetcher pf{base + size_t(a.r0) * size_t(a.k) * esz + prefetch_ahead(size_t(a.k) * esz),
                base + size_t(pf_rows) * size_t(a.k) * esz};
  int64_t r = a.r0;
  if constexpr (T == DType::BF16) {
    // Also for decode: two ALU operations per 32 weights leave the load ports free to keep more
    // lines in flight (measured 1 thread: 10.5 -> 12.5-14 GB/s on a 13 GB/s machine).
    if (a.k % 32 == 0) {
      if (a.w_il) {
        // Whole groups from the packed copy; rows outside them (a thread's range need not
        // start on one) from w.
        const auto [g0, g1] = whole_groups(a.r0, a.r1, kPackBf16.rows);
        if (g0 > a.r0 || g1 < a.r1) deinterleave_pairs(a.x, a.ldx, a.n_tokens, a.k, a.scratch);
        const Prefetcher none{nullptr, nullptr};
        for (; r < g0; ++r) rows_bf16_pairs<1>(a, a.scratch, r, none);
        rows_bf16_packed(a, g0, g1);
        for (r = g1; r < a.r1; ++r) rows_bf16_pairs<1>(a, a.scratch, r, none);
        return;
      }
      deinterleave_pairs(a.x, a.ldx, a.n_tokens, a.k, a.scratch);
      for (; r + 4 <= a.r1; r += 4) pf = rows_bf16_pairs<4>(a, a.scratch, r, pf);
      for (; r < a.r1; ++r) pf = rows_bf16_pairs<1>(a, a.scratch, r, pf);
      return;
    }
  }
  if (a.n_tokens == 1) {
    // Decode: eight independent rows hide the FMA latency.
    for (; r + 8 <= a.r1; r += 8) pf = rows_avx512<T, 8>(a, r, pf);
  }
  for (; r + 4 <= a.r1; r += 4) pf = rows_avx512<T, 4>(a, r, pf);
  for (; r < a.r1; ++r) pf = rows_avx512<T, 1>(a, r, pf);
}

}  // namespace
}  // namespace hearth::cpu
