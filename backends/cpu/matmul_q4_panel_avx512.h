// Q4 from 16-row panels (q4_panel.h) on AVX-512 VNNI: the 16 rows of a group in the lanes of a
// vector, one token's 4 activation codes (element order) broadcast against them by vpdpbusd. A
// nibble is a code as it is (q + 8) or, with a codebook, an index looked up as level + 128; a
// block's integer dot starts at -offset x its activation code sum and is scaled once per block,
// token and 16 rows. Decode (up to kPrefillTokens - 1 tokens) reads each group
// once per step for up to 8 tokens; the prefill GEMM takes its panels from the groups without
// transposing. Include only from matmul_q4_avx512.cpp, matmul_q4cb_avx512.cpp and
// matmul_q8_panel_avx512.h (which shares the activations, broadcasts, scales and prefetches).
#pragma once
#include "backends/cpu/matmul_quant_gemm_avx512.h"
#include "backends/cpu/q4_panel.h"

namespace hearth::cpu::qk {
namespace {

// How far ahead of each group's stream the decode loops prefetch: the hardware prefetchers alone
// fall well short of the bandwidth on these streams (bench/RESULTS.md, "Q4 as 16-row panels").
constexpr int64_t kPanelAhead = 2048;

// Chunks of CodeBytes of codes and then their scales: Q4 panels, and Q8 ones (q8_panel.h).
template <int G, int64_t CodeBytes = kQ4PanelCodeBytes>
inline void prefetch_chunk(const uint8_t* chunk) {
  for (int64_t b = 0; b < CodeBytes + q4_panel_scale_bytes(G); b += 64)
    prefetch(chunk + kPanelAhead + b);
}

// Block bb's 16 row scales of a chunk, as f32.
template <int G, DType ST, int64_t CodeBytes = kQ4PanelCodeBytes>
inline __m512 panel_scales(const uint8_t* chunk, int bb) {
  const int slot = bb * q4_panel_slots(G) / 4;
  return widen_scales16(
      ST, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(chunk + CodeBytes + 32 * slot)));
}

inline __m512i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm512_set1_epi32(v);
}

// What a panel vector's two nibble planes hold, as vpdpbusd's unsigned operands: Q4's codes as
// they are (q + 8), or a codebook's levels + 128 (one vpshufb each).
struct Q4Nibbles {
  static constexpr int kOffsetLog2 = 3;
  void planes(__m512i v, __m512i* lo, __m512i* hi) const {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    *lo = _mm512_and_si512(v, m4);
    *hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
  }
};
struct Q4CbLevels {
  static constexpr int kOffsetLog2 = 7;
  __m512i lut;  // the 16 levels + 128 in each 128-bit lane
  explicit Q4CbLevels(const int8_t* codebook) {
    alignas(16) uint8_t u[16];
    for (int i = 0; i < 16; ++i) u[i] = uint8_t(codebook[i] + 128);
    lut = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(u)));
  }
  void planes(__m512i v, __m512i* lo, __m512i* hi) const {
    Q4Nibbles().planes(v, lo, hi);
    *lo = _mm512_shuffle_epi8(lut, *lo);
    *hi = _mm512_shuffle_epi8(lut, *hi);
  }
};

// T tokens (1-8) against one group of plain Q4: y[t * ldy + i] for its 16 rows i. Below 4 tokens
// each token's nibble planes go to two integer chains, so more vpdpbusd are in flight. Plain Q4
// keeps this loop of its own: panel_tokens below, the same loop over a Q4Nibbles, ran 8 tokens at
// 188-212 GMAC/s against 218-233 for this one (one thread, 0.6B body, alternating;
// bench/RESULTS.md), though the operations are the same; on block-interleaved activations the
// gap shrank to 2% at 8 tokens and 7% at 4 (in one process, 8192 x 1024 from cache).
template <int G, DType ST, int T>
inline void q4_panel_tokens(const uint8_t* group, const PanelActs& x, int t0, float* y,
                            int64_t ldy) {
  constexpr bool kSplit = T < 4;
  const int64_t k = x.k;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t c = 0; c < k / kChunk; ++c) {
    const uint8_t* chunk = group + c * q4_panel_chunk_bytes(G);
    prefetch_chunk<G>(chunk);
    for (int bb = 0; bb < 4; ++bb) {
      const int64_t b = 4 * c + bb;
      __m512i lo_acc[T], hi_acc[T];
      const int8_t* xq = x.codes(t0, b);
      for (int t = 0; t < T; ++t) {
        lo_acc[t] = _mm512_set1_epi32(-8 * x.code_sum(t0 + t, b));
        hi_acc[t] = _mm512_setzero_si512();
      }
      for (int q = 0; q < 4; ++q) {
        const __m512i v = _mm512_loadu_si512(chunk + 256 * bb + 64 * q);
        const __m512i lo = _mm512_and_si512(v, m4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        for (int t = 0; t < T; ++t) {
          const int8_t* xb = xq + kBlock * t + 4 * q;
          lo_acc[t] = _mm512_dpbusd_epi32(lo_acc[t], lo, broadcast4(xb));
          __m512i& h = kSplit ? hi_acc[t] : lo_acc[t];
          h = _mm512_dpbusd_epi32(h, hi, broadcast4(xb + 16));
        }
      }
      const __m512 ws = panel_scales<G, ST>(chunk, bb);
      for (int t = 0; t < T; ++t) {
        const __m512i d = kSplit ? _mm512_add_epi32(lo_acc[t], hi_acc[t]) : lo_acc[t];
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d),
                                 _mm512_mul_ps(ws, _mm512_set1_ps(x.scale(t0 + t, b))), acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * ldy, acc[t]);
}

// The same over N's planes (a codebook's lookup; plain Q4 takes q4_panel_tokens).
template <class N, int G, DType ST, int T>
inline void panel_tokens(const N& nib, const uint8_t* group, const PanelActs& x, int t0, float* y,
                         int64_t ldy) {
  constexpr bool kSplit = T < 4;
  const int64_t k = x.k;
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t c = 0; c < k / kChunk; ++c) {
    const uint8_t* chunk = group + c * q4_panel_chunk_bytes(G);
    prefetch_chunk<G>(chunk);
    for (int bb = 0; bb < 4; ++bb) {
      const int64_t b = 4 * c + bb;
      __m512i lo_acc[T], hi_acc[T];
      const int8_t* xq = x.codes(t0, b);
      for (int t = 0; t < T; ++t) {
        lo_acc[t] = _mm512_set1_epi32(-(1 << N::kOffsetLog2) * x.code_sum(t0 + t, b));
        hi_acc[t] = _mm512_setzero_si512();
      }
      for (int q = 0; q < 4; ++q) {
        __m512i lo, hi;
        nib.planes(_mm512_loadu_si512(chunk + 256 * bb + 64 * q), &lo, &hi);
        for (int t = 0; t < T; ++t) {
          const int8_t* xb = xq + kBlock * t + 4 * q;
          lo_acc[t] = _mm512_dpbusd_epi32(lo_acc[t], lo, broadcast4(xb));
          __m512i& h = kSplit ? hi_acc[t] : lo_acc[t];
          h = _mm512_dpbusd_epi32(h, hi, broadcast4(xb + 16));
        }
      }
      const __m512 ws = panel_scales<G, ST>(chunk, bb);
      for (int t = 0; t < T; ++t) {
        const __m512i d = kSplit ? _mm512_add_epi32(lo_acc[t], hi_acc[t]) : lo_acc[t];
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d),
                                 _mm512_mul_ps(ws, _mm512_set1_ps(x.scale(t0 + t, b))), acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * ldy, acc[t]);
}

// One token against two groups at once, each its own stream (four integer chains in flight).
template <class N, int G, DType ST>
inline void panel_pair(const N& nib, const uint8_t* g0, const uint8_t* g1, const PanelActs& x,
                       float* y0, float* y1) {
  const int64_t k = x.k;
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  for (int64_t c = 0; c < k / kChunk; ++c) {
    const uint8_t* c0 = g0 + c * q4_panel_chunk_bytes(G);
    const uint8_t* c1 = g1 + c * q4_panel_chunk_bytes(G);
    prefetch_chunk<G>(c0);
    prefetch_chunk<G>(c1);
    for (int bb = 0; bb < 4; ++bb) {
      const int64_t b = 4 * c + bb;
      __m512i a0 = _mm512_set1_epi32(-(1 << N::kOffsetLog2) * x.code_sum(0, b)), a1 = a0;
      __m512i h0 = _mm512_setzero_si512(), h1 = h0;
      for (int q = 0; q < 4; ++q) {
        const __m512i xa = broadcast4(x.codes(0, b) + 4 * q);
        const __m512i xb = broadcast4(x.codes(0, b) + 16 + 4 * q);
        __m512i lo0, hi0, lo1, hi1;
        nib.planes(_mm512_loadu_si512(c0 + 256 * bb + 64 * q), &lo0, &hi0);
        nib.planes(_mm512_loadu_si512(c1 + 256 * bb + 64 * q), &lo1, &hi1);
        a0 = _mm512_dpbusd_epi32(a0, lo0, xa);
        h0 = _mm512_dpbusd_epi32(h0, hi0, xb);
        a1 = _mm512_dpbusd_epi32(a1, lo1, xa);
        h1 = _mm512_dpbusd_epi32(h1, hi1, xb);
      }
      const __m512 dx = _mm512_set1_ps(x.scale(0, b));
      acc0 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a0, h0)),
                             _mm512_mul_ps(panel_scales<G, ST>(c0, bb), dx), acc0);
      acc1 = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a1, h1)),
                             _mm512_mul_ps(panel_scales<G, ST>(c1, bb), dx), acc1);
    }
  }
  _mm512_storeu_ps(y0, acc0);
  _mm512_storeu_ps(y1, acc1);
}

// The GEMM's panel (pack_panel's layout) for rows [r, r + n) from whole groups of a copy of gb
// bytes a group: fill(group, col, v) writes the 16-row half v from its group (col: the half's first
// column, kPanelRows dwords a natural dword apart); an absent half is zeroed (its results are never
// stored). Q4 panels here, Q8 ones in matmul_q8_panel_avx512.h.
template <class Fill>
void gemm_panel_halves(const uint8_t* panel, int64_t gb, int64_t r, int n, int64_t k,
                       const GemmActs& g, Fill fill) {
  for (int v = 0; v < kPanelRows / 16; ++v) {
    uint32_t* col = g.panel + 16 * v;
    if (16 * v >= n) {
      for (int64_t d = 0; d < k / 4; ++d)
        _mm512_storeu_si512(col + d * kPanelRows, _mm512_setzero_si512());
      continue;
    }
    fill(panel + (r + 16 * v) / kQ4PanelRows * gb, col, v);
  }
}

// A Q4 group's vectors are already rows in lanes, so each is only split into its nibble planes.
template <class N, int G, DType ST>
void panel_for_gemm(const N& nib, const uint8_t* panel, int64_t r, int n, int64_t k,
                    const GemmActs& g) {
  auto fill = [&](const uint8_t* group, uint32_t* col, int v) {
    for (int64_t c = 0; c < k / kChunk; ++c) {
      const uint8_t* chunk = group + c * q4_panel_chunk_bytes(G);
      for (int bb = 0; bb < 4; ++bb) {
        for (int q = 0; q < 4; ++q) {
          __m512i lo, hi;
          nib.planes(_mm512_loadu_si512(chunk + 256 * bb + 64 * q), &lo, &hi);
          const int64_t dw = 32 * c + 8 * bb + q;  // natural dwords dw and dw + 4
          _mm512_storeu_si512(col + dw * kPanelRows, lo);
          _mm512_storeu_si512(col + (dw + 4) * kPanelRows, hi);
        }
        _mm512_storeu_ps(g.scales + (4 * c + bb) * kPanelRows + 16 * v,
                         panel_scales<G, ST>(chunk, bb));
      }
    }
  };
  gemm_panel_halves(panel, q4_panel_group_bytes(k, G), r, n, k, g, fill);
}

// A panel format's kernels (Q4 and Q4 codebooks here, Q8 in matmul_q8_panel_avx512.h), called on
// an object of it: tokens<G, ST, T> (1-8 tokens against one group), pair<G, ST> (one token against
// two groups), for_gemm<G, ST>, and the bytes of a group.
template <class N>
struct Q4PanelOf {
  static constexpr int kOffsetLog2 = N::kOffsetLog2;
  N nib;
  template <int G, DType ST, int T>
  void tokens(const uint8_t* group, const PanelActs& x, int t0, float* y, int64_t ldy) const {
    if constexpr (std::is_same_v<N, Q4Nibbles>)
      q4_panel_tokens<G, ST, T>(group, x, t0, y, ldy);
    else
      panel_tokens<N, G, ST, T>(nib, group, x, t0, y, ldy);
  }
  template <int G, DType ST>
  void pair(const uint8_t* g0, const uint8_t* g1, const PanelActs& x, float* y0, float* y1) const {
    panel_pair<N, G, ST>(nib, g0, g1, x, y0, y1);
  }
  template <int G, DType ST>
  void for_gemm(const uint8_t* panel, int64_t r, int n, int64_t k, const GemmActs& g) const {
    panel_for_gemm<N, G, ST>(nib, panel, r, n, k, g);
  }
  static int64_t group_bytes(int64_t k, int64_t group) { return q4_panel_group_bytes(k, group); }
};
using Q4Panel = Q4PanelOf<Q4Nibbles>;
using Q4CbPanel = Q4PanelOf<Q4CbLevels>;

// The last `left` (< 8) tokens of a group as one call of exactly that many.
template <class P, int G, DType ST, int T = 7>
inline void panel_tail(const P& p, const uint8_t* group, const PanelActs& x, int t0, int left,
                       float* y, int64_t ldy) {
  if constexpr (T > 0) {
    if (left == T) return p.template tokens<G, ST, T>(group, x, t0, y, ldy);
    panel_tail<P, G, ST, T - 1>(p, group, x, t0, left, y, ldy);
  }
}

// Whole groups [g0, g1) (row indices, multiples of 16) for every token: y row r - y_row0.
template <class P, int G, DType ST>
void panel_decode(const P& p, const uint8_t* panel, int64_t g0, int64_t g1, const PanelActs& x,
                  int n_tokens, float* y, int64_t ldy, int64_t y_row0) {
  const int64_t gb = P::group_bytes(x.k, G);
  auto group = [&](int64_t r) { return panel + r / kQ4PanelRows * gb; };
  if (n_tokens == 1) {
    // Two streams: [g0, g0 + half) beside [g0 + half, g0 + 2 half).
    const int64_t half = (g1 - g0) / (2 * kQ4PanelRows) * kQ4PanelRows;
    for (int64_t r = g0; r < g0 + half; r += kQ4PanelRows)
      p.template pair<G, ST>(group(r), group(r + half), x, y + r - y_row0, y + r + half - y_row0);
    if (g0 + 2 * half < g1)
      p.template tokens<G, ST, 1>(group(g1 - kQ4PanelRows), x, 0, y + g1 - kQ4PanelRows - y_row0,
                                  ldy);
    return;
  }
  for (int64_t r = g0; r < g1; r += kQ4PanelRows) {
    int t = 0;
    for (; t + 8 <= n_tokens; t += 8)
      p.template tokens<G, ST, 8>(group(r), x, t, y + t * ldy + r - y_row0, ldy);
    panel_tail<P, G, ST>(p, group(r), x, t, n_tokens - t, y + t * ldy + r - y_row0, ldy);
  }
}

// Whole 16-row groups from a panel copy (a.w_il) with p's kernels, the rows around them by `rows`
// (the row-major kernel, from w).
template <class P, int G, DType ST, class Rows>
void matmul_panel(const QuantMatmulArgs& a, const P& p, Rows rows) {
  const auto* panel = static_cast<const uint8_t*>(a.w_il);
  const int64_t k = a.k;
  const auto [g0, g1] = whole_groups(a.r0, a.r1, kQ4PanelRows);
  const bool from_w = rows_outside_groups(a, {g0, g1}, rows);
  if (g0 >= g1) return;
  if (a.n_tokens >= kPrefillTokens) {
    // The activations where the rows from w (gemm_quant) left them, if they ran: the same carve.
    const GemmActs g = gemm_acts<GemmAvx512>(a, P::kOffsetLog2);
    for (int64_t r = g0; r < g1; r += kPanelRows) {
      const int n = int(min64(kPanelRows, g1 - r));
      p.template for_gemm<G, ST>(panel, r, n, k, g);
      gemm_tokens<GemmAvx512>(g, k, a.n_tokens, a.y + (r - a.r0), a.ldy, n);
    }
    return;
  }
  ActTile at;
  carve_act_tile(a.scratch, k, &at);
  auto* sum = reinterpret_cast<int32_t*>(at.s);
  const int n = a.n_tokens;
  for (int t = 0; t < n && (!a.reuse_x || from_w); ++t)
    quantize_act_blocks_avx512(a.x + t * a.ldx, k, at.q + kBlock * t, at.d + t, sum + t, n);
  panel_decode<P, G, ST>(p, panel, g0, g1, PanelActs{at.q, at.d, sum, k, n}, n, a.y, a.ldy, a.r0);
}

}  // namespace
}  // namespace hearth::cpu::qk
