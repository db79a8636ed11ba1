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

// IL: w is a group of 4 packed rows (pack_rows, kPackBf16), whose chunks of 32 columns lie side
// by side.
template <int R, int NT, bool IL = false>
inline Prefetcher block_bf16_pairs(const uint16_t* w, int64_t k, const float* xp, float* y,
                                   int64_t ldy, Prefetcher pf) {
  static_assert(!IL || R == kPackBf16.rows, "packed rows come in groups of 4");
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
      const __m512i v = _mm512_loadu_si512(IL ? w + 4 * i + 32 * r : w + r * k + i);
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

// Two packed groups of 4 rows (w[0], w[1]) against one token, each a sequential stream left to the
// hardware prefetchers, without software prefetch. Each row's sums are formed exactly as in
// block_bf16_pairs, so a row's result does not depend on which path read it. On Zen 5, one thread,
// all 0.6B (1.7B) matrices: 98.5% (98.8%) of the read bandwidth against 90% for one stream with
// prefetch.
inline void block_bf16_pairs_x2(const uint16_t* const* w, int64_t k, const float* xp,
                                float* const* y) {
  const __m512i high = _mm512_set1_epi32(int32_t(0xFFFF0000u));
  __m512 acc[2][4];
#pragma GCC unroll 8
  for (int s = 0; s < 2; ++s)
    for (int r = 0; r < 4; ++r) acc[s][r] = _mm512_setzero_ps();
  for (int64_t i = 0; i < k; i += 32) {
    const __m512 xe = _mm512_loadu_ps(xp + i), xo = _mm512_loadu_ps(xp + i + 16);
#pragma GCC unroll 8
    for (int s = 0; s < 2; ++s)
#pragma GCC unroll 4
      for (int r = 0; r < 4; ++r) {
        const __m512i v = _mm512_loadu_si512(w[s] + 4 * i + 32 * r);
        const __m512 we = _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
        const __m512 wo = _mm512_castsi512_ps(_mm512_and_si512(v, high));
        acc[s][r] = _mm512_fmadd_ps(we, xe, acc[s][r]);
        acc[s][r] = _mm512_fmadd_ps(wo, xo, acc[s][r]);
      }
  }
#pragma GCC unroll 8
  for (int s = 0; s < 2; ++s)
    for (int r = 0; r < 4; ++r) y[s][r] = hsum16(acc[s][r]);
}

template <int R, bool IL = false>
inline Prefetcher rows_bf16_pairs(const MatmulArgs& a, const float* xp, int64_t r, Prefetcher pf) {
  const uint16_t* w = static_cast<const uint16_t*>(IL ? a.w_il : a.w) + r * a.k;
  for (int t = 0; t < a.n_tokens; t += 4) {
    const float* x = xp + t * a.k;
    float* y = a.y + t * a.ldy + (r - a.r0);
    const Prefetcher p = t == 0 ? pf : Prefetcher{nullptr, nullptr};
    Prefetcher q;
    switch (a.n_tokens - t) {
      case 1:
        q = block_bf16_pairs<R, 1, IL>(w, a.k, x, y, a.ldy, p);
        break;
      case 2:
        q = block_bf16_pairs<R, 2, IL>(w, a.k, x, y, a.ldy, p);
        break;
      case 3:
        q = block_bf16_pairs<R, 3, IL>(w, a.k, x, y, a.ldy, p);
        break;
      default:
        q = block_bf16_pairs<R, 4, IL>(w, a.k, x, y, a.ldy, p);
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
      deinterleave_pairs(a.x, a.ldx, a.n_tokens, a.k, a.scratch);
      if (a.w_il) {
        // Packed rows: whole groups from the packed copy (for one token as two streams, else as
        // one prefetch stream); rows outside whole groups (a thread's range need not start on
        // one) from w.
        const auto [g0, g1] = whole_groups(a.r0, a.r1, kPackBf16.rows);
        const Prefetcher none{nullptr, nullptr};
        for (; r < g0; ++r) rows_bf16_pairs<1>(a, a.scratch, r, none);
        if (a.n_tokens == 1) {
          // Decode: whole groups as two streams, [g0, g0 + half) beside [g0 + half, g0 + 2 half).
          const int64_t half = (g1 - g0) / 8 * 4;
          const auto* w = static_cast<const uint16_t*>(a.w_il);
          for (; r < g0 + half; r += 4) {
            const uint16_t* ws[2] = {w + r * a.k, w + (r + half) * a.k};
            float* ys[2] = {a.y + (r - a.r0), a.y + (r + half - a.r0)};
            block_bf16_pairs_x2(ws, a.k, a.scratch, ys);
          }
          r = g0 + 2 * half;
        }
        // The groups left (all of them for several tokens), ahead of where they start.
        const char* il = static_cast<const char*>(a.w_il);
        const size_t row_bytes = size_t(a.k) * 2;
        Prefetcher pil{il + size_t(r) * row_bytes + prefetch_ahead(row_bytes),
                       il + size_t(pf_rows / 4 * 4) * row_bytes};
        for (; r < g1; r += 4) pil = rows_bf16_pairs<4, true>(a, a.scratch, r, pil);
        for (; r < a.r1; ++r) rows_bf16_pairs<1>(a, a.scratch, r, none);
        return;
      }
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
