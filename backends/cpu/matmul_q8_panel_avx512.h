// Q8 from 16-row panels (q8_panel.h) on AVX-512 VNNI: the 16 rows of a group in the lanes of a
// vector, their codes + 128 against one token's 4 activation codes (element order, broadcast) by
// vpdpbusd. A block's integer dot starts at -128 x its activation code sum and is scaled once per
// block, token and 16 rows, as for Q4 panels (matmul_q4_panel_avx512.h, whose activations, scales
// and prefetches it shares). Include only from matmul_q8_avx512.cpp.
#pragma once
#include "backends/cpu/matmul_q4_panel_avx512.h"
#include "backends/cpu/q8_panel.h"

namespace hearth::cpu::qk {
namespace {

// T tokens (1-8) against one group: y[t * ldy + i] for its 16 rows i. Below 4 tokens each token
// has two integer chains (even and odd dwords), so more vpdpbusd are in flight.
template <int G, DType ST, int T>
inline void q8_panel_tokens(const uint8_t* group, const PanelActs& x, int t0, float* y,
                            int64_t ldy) {
  constexpr bool kSplit = T < 4;
  const int64_t k = x.k;
  __m512 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm512_setzero_ps();
  for (int64_t c = 0; c < k / kChunk; ++c) {
    const uint8_t* chunk = group + c * q8_panel_chunk_bytes(G);
    prefetch_chunk<G, kQ8PanelCodeBytes>(chunk);
    for (int bb = 0; bb < 4; ++bb) {
      const int64_t b = 4 * c + bb;
      __m512i d0[T], d1[T];
      const int8_t* xq = x.codes(t0, b);
      for (int t = 0; t < T; ++t) {
        d0[t] = _mm512_set1_epi32(-128 * x.code_sum(t0 + t, b));
        d1[t] = _mm512_setzero_si512();
      }
#pragma GCC unroll 8
      for (int q = 0; q < 8; ++q) {
        const __m512i v = _mm512_loadu_si512(chunk + 512 * bb + 64 * q);
#pragma GCC unroll 8
        for (int t = 0; t < T; ++t) {
          __m512i& d = kSplit && q % 2 ? d1[t] : d0[t];
          d = _mm512_dpbusd_epi32(d, v, broadcast4(xq + kBlock * t + 4 * q));
        }
      }
      const __m512 ws = panel_scales<G, ST, kQ8PanelCodeBytes>(chunk, bb);
      for (int t = 0; t < T; ++t) {
        const __m512i d = kSplit ? _mm512_add_epi32(d0[t], d1[t]) : d0[t];
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d),
                                 _mm512_mul_ps(ws, _mm512_set1_ps(x.scale(t0 + t, b))), acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) _mm512_storeu_ps(y + t * ldy, acc[t]);
}

// One token against two groups at once, each its own stream.
template <int G, DType ST>
inline void q8_panel_pair(const uint8_t* g0, const uint8_t* g1, const PanelActs& x, float* y0,
                          float* y1) {
  const int64_t k = x.k;
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  for (int64_t c = 0; c < k / kChunk; ++c) {
    const uint8_t* c0 = g0 + c * q8_panel_chunk_bytes(G);
    const uint8_t* c1 = g1 + c * q8_panel_chunk_bytes(G);
    prefetch_chunk<G, kQ8PanelCodeBytes>(c0);
    prefetch_chunk<G, kQ8PanelCodeBytes>(c1);
    for (int bb = 0; bb < 4; ++bb) {
      const int64_t b = 4 * c + bb;
      __m512i a0 = _mm512_set1_epi32(-128 * x.code_sum(0, b)), a1 = a0;
      __m512i h0 = _mm512_setzero_si512(), h1 = h0;
      for (int q = 0; q < 8; q += 2) {
        const __m512i xa = broadcast4(x.codes(0, b) + 4 * q);
        const __m512i xb = broadcast4(x.codes(0, b) + 4 * q + 4);
        a0 = _mm512_dpbusd_epi32(a0, _mm512_loadu_si512(c0 + 512 * bb + 64 * q), xa);
        h0 = _mm512_dpbusd_epi32(h0, _mm512_loadu_si512(c0 + 512 * bb + 64 * q + 64), xb);
        a1 = _mm512_dpbusd_epi32(a1, _mm512_loadu_si512(c1 + 512 * bb + 64 * q), xa);
        h1 = _mm512_dpbusd_epi32(h1, _mm512_loadu_si512(c1 + 512 * bb + 64 * q + 64), xb);
      }
      const __m512 dx = _mm512_set1_ps(x.scale(0, b));
      acc0 =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a0, h0)),
                          _mm512_mul_ps(panel_scales<G, ST, kQ8PanelCodeBytes>(c0, bb), dx), acc0);
      acc1 =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(a1, h1)),
                          _mm512_mul_ps(panel_scales<G, ST, kQ8PanelCodeBytes>(c1, bb), dx), acc1);
    }
  }
  _mm512_storeu_ps(y0, acc0);
  _mm512_storeu_ps(y1, acc1);
}

// The GEMM's panel (gemm_panel_halves): a Q8 group's vectors are already rows in lanes, codes +
// 128, in element order.
template <int G, DType ST>
void q8_panel_for_gemm(const uint8_t* panel, int64_t r, int n, int64_t k, const GemmActs& g) {
  auto fill = [&](const uint8_t* group, uint32_t* col, int v) {
    for (int64_t c = 0; c < k / kChunk; ++c) {
      const uint8_t* chunk = group + c * q8_panel_chunk_bytes(G);
      for (int bb = 0; bb < 4; ++bb) {
        for (int q = 0; q < 8; ++q)
          _mm512_storeu_si512(col + (32 * c + 8 * bb + q) * kPanelRows,
                              _mm512_loadu_si512(chunk + 512 * bb + 64 * q));
        _mm512_storeu_ps(g.scales + (4 * c + bb) * kPanelRows + 16 * v,
                         panel_scales<G, ST, kQ8PanelCodeBytes>(chunk, bb));
      }
    }
  };
  gemm_panel_halves(panel, q8_panel_group_bytes(k, G), r, n, k, g, fill);
}

// Its kernels for panel_decode and matmul_panel (matmul_q4_panel_avx512.h).
struct Q8Panel {
  static constexpr int kOffsetLog2 = 7;  // codes are q + 128
  template <int G, DType ST, int T>
  static void tokens(const uint8_t* group, const PanelActs& x, int t0, float* y, int64_t ldy) {
    q8_panel_tokens<G, ST, T>(group, x, t0, y, ldy);
  }
  template <int G, DType ST>
  static void pair(const uint8_t* g0, const uint8_t* g1, const PanelActs& x, float* y0, float* y1) {
    q8_panel_pair<G, ST>(g0, g1, x, y0, y1);
  }
  template <int G, DType ST>
  static void for_gemm(const uint8_t* panel, int64_t r, int n, int64_t k, const GemmActs& g) {
    q8_panel_for_gemm<G, ST>(panel, r, n, k, g);
  }
  static int64_t group_bytes(int64_t k, int64_t group) { return q8_panel_group_bytes(k, group); }
};

}  // namespace
}  // namespace hearth::cpu::qk
