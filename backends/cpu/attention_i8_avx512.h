// An I8 KV cache's decode rows on AVX-512 VNNI integer dot products: a query row [head_dim] as
// int16 codes against key codes [position][head_dim] widened to int16 (vpdpwssd); a tile's softmax
// weights as 16-bit codes, high and low bytes [position], against four positions' value codes
// interleaved per dword (vpdpbusd). Include only from attention_avx512.cpp (anonymous namespace).
#pragma once
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "backends/cpu/attention_scratch.h"
#include "backends/cpu/simd_avx512.h"

namespace hearth::cpu {
namespace {

// An I8 cache's decode rows take their key dot products in integers: a query row times the key
// factors rounded to 16-bit codes (round_query16, bit for bit), the keys' codes widened to 16 bits,
// vpdpwssd. Per 32 key bytes that is one widening and one dot a row, where the f32 path took two
// conversions and two FMAs a row: decode over an I8 cache was bound by those, not by memory.
// round_query16 of a row of hd (a multiple of 16) floats, bit for bit.
inline float round_query16_avx512(const float* x, int hd, int16_t* q) {
  const __m512 zero = _mm512_setzero_ps();
  __m512 mx = zero;
  __mmask16 bad = 0;
  for (int d = 0; d < hd; d += 16) {
    const __m512 v = _mm512_loadu_ps(x + d);
    mx = _mm512_max_ps(mx, _mm512_abs_ps(v));
    bad |= _mm512_cmp_ps_mask(_mm512_mul_ps(v, zero), zero, _CMP_NEQ_UQ);  // NaN or infinite
  }
  const float amax = hmax16(mx);
  if (bad) {
    std::memset(q, 0, size_t(hd) * 2);
    return NAN;
  }
  const __m512 inv = _mm512_set1_ps(amax > 0.f ? 32767.f / amax : 0.f);
  const __m512 lim = _mm512_set1_ps(32767.f);
  for (int d = 0; d < hd; d += 16) {
    __m512 y = _mm512_mul_ps(_mm512_loadu_ps(x + d), inv);
    y = _mm512_min_ps(_mm512_max_ps(y, _mm512_sub_ps(zero, lim)), lim);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + d),
                        _mm512_cvtepi32_epi16(_mm512_cvtps_epi32(y)));
  }
  return amax / 32767.f;
}

// Key codes at c of a row, widened to 16 bits.
inline __m512i key32(const int8_t* k, int64_t i) {
  return _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + i)));
}

// Scores of R query rows (1 or 2 heads of one token, which see the same keys) against n
// keys: row r's rounded query q[r] and its code scale times the softmax scale f[r], into s[r] as
// scores<I8> leaves them. Blocks of J = 16 / R keys: one widening of a key chunk feeds every row,
// and lane r J + j of the reduction is row r's score of key j.
template <int R>
inline void scores_i8(const int16_t* const* q, const float* f, const int8_t* kt, const void* pf,
                      int n, int hd, const float* ks, float* const* s) {
  constexpr int J = 16 / R;
  alignas(64) float fl[16];
  for (int v = 0; v < 16; ++v) fl[v] = f[v / J];
  const __m512 fv = _mm512_load_ps(fl);
  for (int j0 = 0; j0 < n; j0 += J) {
    __m512i acc[16];
    int64_t rows[J];
#pragma GCC unroll 16
    for (int j = 0; j < J; ++j) rows[j] = int64_t(j0 + j < n ? j0 + j : n - 1) * hd;
#pragma GCC unroll 16
    for (int v = 0; v < 16; ++v) acc[v] = _mm512_setzero_si512();
    for (int c = 0; c < hd; c += 32) {
      __m512i qc[R];
#pragma GCC unroll 4
      for (int r = 0; r < R; ++r) qc[r] = _mm512_loadu_si512(q[r] + c);
#pragma GCC unroll 16
      for (int j = 0; j < J; ++j) {
        const __m512i k = key32(kt, rows[j] + c);
        if (pf && c % 64 == 0) prefetch_l2(static_cast<const int8_t*>(pf) + rows[j] + c);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) acc[r * J + j] = _mm512_dpwssd_epi32(acc[r * J + j], qc[r], k);
      }
    }
    const int valid = n - j0 < J ? n - j0 : J;
    alignas(64) float kl[16];
    __mmask16 seen = 0;  // lanes of keys before n
    for (int v = 0; v < 16; ++v) {
      kl[v] = v % J < valid ? ks[j0 + v % J] : 0.f;
      seen |= __mmask16((v % J < valid ? 1u : 0u) << v);
    }
    __m512 r =
        _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(reduce16i(acc)), fv), _mm512_load_ps(kl));
    r = _mm512_mask_blend_ps(seen, _mm512_set1_ps(-INFINITY), r);
    alignas(64) float out[16];
    _mm512_store_ps(out, r);
    for (int rr = 0; rr < R; ++rr) std::memcpy(s[rr] + j0, out + rr * J, sizeof(float) * J);
  }
}

// The values' side in integers too: a tile's softmax weights times the value scales (w >= 0) as
// 16-bit codes against their largest, split into high and low bytes, 4 positions a dword; four
// positions' value codes interleaved into dwords (two byte and two word unpacks per 64 channels),
// so that one vpdpbusd adds 4 positions' products for 16 channels. Channel d = 16 L + 4 i + e of a
// 64-channel chunk lands in lane 4 L + e of vector i: a row's accumulator is kept in that order
// (unpermute_values puts it back). Per 64 channels and 4 positions: 8 shuffles and 2 dot products
// a row, where the f32 path took 16 conversions and 16 FMAs a row.
struct TileWeights {
  alignas(64) uint8_t hi[kAttnKeyTile];
  alignas(64) uint8_t lo[kAttnKeyTile];
  float scale;  // a weight is (256 hi + lo) * scale
};

// e[0..n) times vs (padded with zeros to whole vectors, as softmax_tile leaves e) into w.
inline void tile_weights(const float* e, const float* vs, int n, TileWeights* w) {
  __m512 mx = _mm512_setzero_ps();
  alignas(64) float x[kAttnKeyTile];
  for (int j = 0; j < n; j += 16) {
    const __mmask16 m = tail_mask16(n - j < 16 ? n - j : 16);
    const __m512 v =
        _mm512_mul_ps(_mm512_maskz_loadu_ps(m, e + j), _mm512_maskz_loadu_ps(m, vs + j));
    _mm512_store_ps(x + j, v);
    mx = _mm512_max_ps(mx, v);
  }
  const float top = hmax16(mx);
  w->scale = top / 65535.f;
  const __m512 inv = _mm512_set1_ps(top > 0.f ? 65535.f / top : 0.f);
  for (int j = 0; j < n; j += 16) {
    const __m512i c = _mm512_cvtps_epi32(
        _mm512_min_ps(_mm512_mul_ps(_mm512_load_ps(x + j), inv), _mm512_set1_ps(65535.f)));
    _mm_store_si128(reinterpret_cast<__m128i*>(w->lo + j),
                    _mm512_cvtepi32_epi8(_mm512_and_si512(c, _mm512_set1_epi32(255))));
    _mm_store_si128(reinterpret_cast<__m128i*>(w->hi + j),
                    _mm512_cvtepi32_epi8(_mm512_srli_epi32(c, 8)));
  }
}

inline __m512i quad(const uint8_t* p, int q) {
  int32_t v;
  std::memcpy(&v, p + 4 * q, 4);
  return _mm512_set1_epi32(v);
}

// o[r] (permuted as above) += sum_j w[r]_j v_j over n value rows of an I8 cache, R rows (1 or 2).
// Four rows a pass (half the channels a pass, for registers) measured mixed against pairs:
// faster at 4 heads a KV head, slower at 8 (bench/RESULTS.md).
template <int R>
inline void accumulate_v_i8(const TileWeights* w, const int8_t* vt, int n, int hd, float* const* o,
                            const void* next) {
  const int quads = (n + 3) / 4;
  for (int d0 = 0; d0 < hd; d0 += 64) {
    __m512i h[R][4], l[R][4];
    for (int r = 0; r < R; ++r)
      for (int i = 0; i < 4; ++i) h[r][i] = l[r][i] = _mm512_setzero_si512();
    for (int q = 0; q < quads; ++q) {
      __m512i x[4];
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {
        // Positions past n have zero weights; they read row n - 1 so no load leaves the tile.
        const int64_t row = int64_t(4 * q + j < n ? 4 * q + j : n - 1) * hd + d0;
        x[j] = _mm512_loadu_si512(vt + row);
        // The first pass prefetches the next rows whole (their lines are read in one go).
        if (next && d0 == 0)
          for (int b = 0; b < hd; b += 64) prefetch_l2(static_cast<const int8_t*>(next) + row + b);
      }
      const __m512i ab0 = _mm512_unpacklo_epi8(x[0], x[1]), ab1 = _mm512_unpackhi_epi8(x[0], x[1]);
      const __m512i cd0 = _mm512_unpacklo_epi8(x[2], x[3]), cd1 = _mm512_unpackhi_epi8(x[2], x[3]);
      const __m512i v[4] = {_mm512_unpacklo_epi16(ab0, cd0), _mm512_unpackhi_epi16(ab0, cd0),
                            _mm512_unpacklo_epi16(ab1, cd1), _mm512_unpackhi_epi16(ab1, cd1)};
      for (int r = 0; r < R; ++r) {
        const __m512i wh = quad(w[r].hi, q), wl = quad(w[r].lo, q);
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) {
          h[r][i] = _mm512_dpbusd_epi32(h[r][i], wh, v[i]);
          l[r][i] = _mm512_dpbusd_epi32(l[r][i], wl, v[i]);
        }
      }
    }
    // 64 positions: |h| < 2^21, so 256 h + l stays within int32.
    for (int r = 0; r < R; ++r) {
      const __m512 f = _mm512_set1_ps(w[r].scale);
      for (int i = 0; i < 4; ++i) {
        float* oi = o[r] + d0 + 16 * i;
        const __m512i sum = _mm512_add_epi32(_mm512_slli_epi32(h[r][i], 8), l[r][i]);
        _mm512_storeu_ps(oi, _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum), f, _mm512_loadu_ps(oi)));
      }
    }
  }
}

// A row's accumulator from accumulate_v_i8's order back to channel order.
inline void unpermute_values(float* o, int hd) {
  alignas(64) float t[64];
  for (int d0 = 0; d0 < hd; d0 += 64) {
    std::memcpy(t, o + d0, sizeof t);
    for (int i = 0; i < 4; ++i)
      for (int L = 0; L < 4; ++L)
        for (int e = 0; e < 4; ++e) o[d0 + 16 * L + 4 * i + e] = t[16 * i + 4 * L + e];
  }
}

}  // namespace
}  // namespace hearth::cpu
