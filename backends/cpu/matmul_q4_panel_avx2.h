// Q4 from 16-row panels (q4_panel.h) on AVX2: each 64-byte panel vector is two 8-lane halves,
// rows 0-7 and 8-15 of the group, and one token's 4 activation codes (element order) are broadcast
// against a half by Dot (vpdpbusd with AVX-VNNI, maddubs and madd without). A block's integer dot
// starts at -8 x its activation code sum (the codes are q + 8) and is scaled once per block, token
// and 8 rows; each (row, token) takes the same operations in the same order for any number of
// tokens, as on AVX-512 (matmul_q4_panel_avx512.h), so a batched step gives each sequence its own
// step's floats. The copy is the AVX-512 kernels' own: one layout for both ISAs. Include only from
// matmul_q4_avx2.cpp and matmul_q4_avxvnni.cpp.
#pragma once
#include "backends/cpu/matmul_quant_avx2.h"
#include "backends/cpu/q4_panel.h"
#include "backends/cpu/quant_dispatch.h"

namespace hearth::cpu::qk {
namespace {

// How far ahead of a group's stream decode prefetches (into L1): the hardware prefetchers alone
// fall short on these streams, as on AVX-512 (bench/RESULTS.md, "Q4 as 16-row panels").
constexpr int64_t kQ4PanelAhead = 2048;

template <int G>
inline void prefetch_q4_chunk(const uint8_t* chunk) {
  for (int64_t b = 0; b < q4_panel_chunk_bytes(G); b += 64)
    _mm_prefetch(reinterpret_cast<const char*>(chunk + kQ4PanelAhead + b), _MM_HINT_T0);
}

// Block bb's scales of rows 8h .. 8h + 7 of a chunk, as f32.
template <int G, DType ST>
inline __m256 half_scales(const uint8_t* chunk, int bb, int h) {
  const int slot = bb * q4_panel_slots(G) / 4;
  const __m128i s = _mm_loadu_si128(
      reinterpret_cast<const __m128i*>(chunk + kQ4PanelCodeBytes + 32 * slot + 16 * h));
  if constexpr (ST == DType::BF16)
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(s), 16));
  else
    return _mm256_cvtph_ps(s);
}

inline __m256i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

// The low and high nibble planes of half h of vector q of block bb of a chunk.
inline void half_planes(const uint8_t* chunk, int bb, int q, int h, __m256i* lo, __m256i* hi) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i v = load256(chunk + 256 * bb + 64 * q + 32 * h);
  *lo = _mm256_and_si256(v, m4);
  *hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
}

// One token against one group (the last of an odd count), both halves in one pass over its
// stream, each half's nibble planes in two integer chains (four in flight): y[0..16).
template <class Dot, int G, DType ST>
inline void q4_group_token(const uint8_t* group, const PanelActs& x, float* y) {
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t c = 0; c < x.k / kChunk; ++c) {
    const uint8_t* chunk = group + c * q4_panel_chunk_bytes(G);
    prefetch_q4_chunk<G>(chunk);
    for (int bb = 0; bb < 4; ++bb) {
      const int64_t b = 4 * c + bb;
      const __m256i init = _mm256_set1_epi32(-8 * x.sum[b]);
      __m256i lo_acc[2], hi_acc[2];
      for (int h = 0; h < 2; ++h) {
        lo_acc[h] = Dot::begin(init);
        hi_acc[h] = Dot::begin(_mm256_setzero_si256());
      }
      for (int q = 0; q < 4; ++q) {
        const __m256i xa = broadcast4(x.q + 32 * b + 4 * q);
        const __m256i xb = broadcast4(x.q + 32 * b + 16 + 4 * q);
        for (int h = 0; h < 2; ++h) {
          __m256i lo, hi;
          half_planes(chunk, bb, q, h, &lo, &hi);
          lo_acc[h] = Dot::step(lo_acc[h], lo, xa);
          hi_acc[h] = Dot::step(hi_acc[h], hi, xb);
        }
      }
      const __m256 dx = _mm256_set1_ps(x.d[b]);
      for (int h = 0; h < 2; ++h)
        acc[h] = _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(_mm256_add_epi32(Dot::end(lo_acc[h], init),
                                                Dot::end(hi_acc[h], _mm256_setzero_si256()))),
            _mm256_mul_ps(half_scales<G, ST>(chunk, bb, h), dx), acc[h]);
    }
  }
  _mm256_storeu_ps(y, acc[0]);
  _mm256_storeu_ps(y + 8, acc[1]);
}

// One token against two groups at once, each its own stream, one integer chain per half (four in
// flight, two streams): on one Zen 5 thread the 0.6B body reads 29-30 GB/s this way against
// 24-25 from one group at a time, as fast as the AVX-512 panels in the same runs.
template <class Dot, int G, DType ST>
inline void q4_group_pair(const uint8_t* g0, const uint8_t* g1, const PanelActs& x, float* y0,
                          float* y1) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  for (int64_t c = 0; c < x.k / kChunk; ++c) {
    const uint8_t* chunk[2] = {g0 + c * q4_panel_chunk_bytes(G), g1 + c * q4_panel_chunk_bytes(G)};
    prefetch_q4_chunk<G>(chunk[0]);
    prefetch_q4_chunk<G>(chunk[1]);
    for (int bb = 0; bb < 4; ++bb) {
      const int64_t b = 4 * c + bb;
      const __m256i init = _mm256_set1_epi32(-8 * x.sum[b]);
      __m256i ia[4];
      for (int i = 0; i < 4; ++i) ia[i] = Dot::begin(init);
      for (int q = 0; q < 4; ++q) {
        const __m256i xa = broadcast4(x.q + 32 * b + 4 * q);
        const __m256i xb = broadcast4(x.q + 32 * b + 16 + 4 * q);
        for (int i = 0; i < 4; ++i) {
          __m256i lo, hi;
          half_planes(chunk[i / 2], bb, q, i % 2, &lo, &hi);
          ia[i] = Dot::step(Dot::step(ia[i], lo, xa), hi, xb);
        }
      }
      const __m256 dx = _mm256_set1_ps(x.d[b]);
      for (int i = 0; i < 4; ++i)
        acc[i] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(Dot::end(ia[i], init)),
                            _mm256_mul_ps(half_scales<G, ST>(chunk[i / 2], bb, i % 2), dx), acc[i]);
    }
  }
  _mm256_storeu_ps(y0, acc[0]);
  _mm256_storeu_ps(y0 + 8, acc[1]);
  _mm256_storeu_ps(y1, acc[2]);
  _mm256_storeu_ps(y1 + 8, acc[3]);
}

// T tokens (1-4: their accumulators and integer chains fill the 16 registers) against half h of
// one group: y[t * ldy + i] for its 8 rows i. pf: prefetch the stream (the group's first pass).
template <class Dot, int G, DType ST, int T>
inline void q4_half_tokens(const uint8_t* group, int h, const PanelActs& x, int t0, float* y,
                           int64_t ldy, bool pf) {
  const int64_t k = x.k, nb = k / kBlock;
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t c = 0; c < k / kChunk; ++c) {
    const uint8_t* chunk = group + c * q4_panel_chunk_bytes(G);
    if (pf) prefetch_q4_chunk<G>(chunk);
    for (int bb = 0; bb < 4; ++bb) {
      const int64_t b = 4 * c + bb;
      __m256i ia[T];
      for (int t = 0; t < T; ++t)
        ia[t] = Dot::begin(_mm256_set1_epi32(-8 * x.sum[(t0 + t) * nb + b]));
      for (int q = 0; q < 4; ++q) {
        __m256i lo, hi;
        half_planes(chunk, bb, q, h, &lo, &hi);
        for (int t = 0; t < T; ++t) {
          const int8_t* xb = x.q + (t0 + t) * k + 32 * b + 4 * q;
          ia[t] = Dot::step(Dot::step(ia[t], lo, broadcast4(xb)), hi, broadcast4(xb + 16));
        }
      }
      const __m256 ws = half_scales<G, ST>(chunk, bb, h);
      for (int t = 0; t < T; ++t)
        acc[t] = _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(Dot::end(ia[t], _mm256_set1_epi32(-8 * x.sum[(t0 + t) * nb + b]))),
            _mm256_mul_ps(ws, _mm256_set1_ps(x.d[(t0 + t) * nb + b])), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) _mm256_storeu_ps(y + t * ldy + 8 * h, acc[t]);
}

// Tokens [t0, t0 + n) (n <= 4) against half h of a group, as one call of exactly n.
template <class Dot, int G, DType ST, int T = 4>
inline void q4_half_tail(const uint8_t* group, int h, const PanelActs& x, int t0, int n, float* y,
                         int64_t ldy, bool pf) {
  if constexpr (T > 0) {
    if (n == T) return q4_half_tokens<Dot, G, ST, T>(group, h, x, t0, y, ldy, pf);
    q4_half_tail<Dot, G, ST, T - 1>(group, h, x, t0, n, y, ldy, pf);
  }
}

// Whole groups [g0, g1) (row indices, multiples of 16) for n tokens (at most a token tile): y row
// r - y_row0. One token reads two groups at a time, [g0, g0 + half) beside [g0 + half,
// g0 + 2 half); several take a group half by half and four tokens at a time, from L1 after the
// first pass (a group is 9-27 KiB at the 0.6B's widths).
template <class Dot, int G, DType ST>
void q4_panel_decode(const uint8_t* panel, int64_t g0, int64_t g1, const PanelActs& x, int n,
                     float* y, int64_t ldy, int64_t y_row0) {
  const int64_t gb = q4_panel_group_bytes(x.k, G);
  auto group = [&](int64_t r) { return panel + r / kQ4PanelRows * gb; };
  if (n == 1) {
    const int64_t half = (g1 - g0) / (2 * kQ4PanelRows) * kQ4PanelRows;
    for (int64_t r = g0; r < g0 + half; r += kQ4PanelRows)
      q4_group_pair<Dot, G, ST>(group(r), group(r + half), x, y + r - y_row0,
                                y + r + half - y_row0);
    if (g0 + 2 * half < g1)
      q4_group_token<Dot, G, ST>(group(g1 - kQ4PanelRows), x, y + g1 - kQ4PanelRows - y_row0);
    return;
  }
  for (int64_t r = g0; r < g1; r += kQ4PanelRows)
    for (int h = 0; h < 2; ++h)
      for (int t = 0; t < n; t += 4)
        q4_half_tail<Dot, G, ST>(group(r), h, x, t, n - t < 4 ? n - t : 4,
                                 y + t * ldy + (r - y_row0), ldy, h == 0 && t == 0);
}

// Whole 16-row groups from the panel copy (a.w_il), the rows around them by `rows` (the
// row-major kernel, from w). gemm(a, g0, g1, G, ST) (the last two as std::integral_constant) runs
// a long step's whole groups where the ISA has an int8 GEMM and returns whether it did; otherwise
// every step goes through the decode kernels, a token tile at a time.
template <class Dot, int G, DType ST, class Rows, class Gemm>
void matmul_q4_panel(const QuantMatmulArgs& a, Rows rows, Gemm gemm) {
  const auto* panel = static_cast<const uint8_t*>(a.w_il);
  const int64_t k = a.k, nb = k / kBlock;
  const auto [g0, g1] = whole_groups(a.r0, a.r1, kQ4PanelRows);
  const bool from_w = rows_outside_groups(a, {g0, g1}, rows);
  if (g0 >= g1 ||
      gemm(a, g0, g1, std::integral_constant<int, G>(), std::integral_constant<DType, ST>()))
    return;
  ActTile at;
  carve_act_tile(a.scratch, k, &at);
  auto* sum = reinterpret_cast<int32_t*>(at.s);
  const bool reuse = a.reuse_x && !from_w && a.n_tokens <= kTokenTile;
  for (int t0 = 0; t0 < a.n_tokens; t0 += kTokenTile) {
    const int n = int(min64(kTokenTile, a.n_tokens - t0));
    for (int t = 0; t < n && !reuse; ++t)
      quantize_act_blocks_avx2(a.x + (t0 + t) * a.ldx, k, at.q + t * k, at.d + t * nb,
                               sum + t * nb);
    q4_panel_decode<Dot, G, ST>(panel, g0, g1, PanelActs{at.q, at.d, sum, k}, n, a.y + t0 * a.ldy,
                                a.ldy, a.r0);
  }
}

// The Q4 QuantMatmulFn of an AVX2 file: row-major codes (no copy) through rows, a panel copy
// through matmul_q4_panel with the file's Dot and gemm.
template <class Dot, class Rows, class Gemm>
void matmul_q4_avx2_panels(const QuantMatmulArgs& a, Rows rows, Gemm gemm) {
  if (!a.w_il) return rows(a);
  with_group(a.group, [&](auto g) {
    constexpr int G = decltype(g)::value;
    if (a.scale_dtype == DType::BF16) return matmul_q4_panel<Dot, G, DType::BF16>(a, rows, gemm);
    matmul_q4_panel<Dot, G, DType::F16>(a, rows, gemm);
  });
}

}  // namespace
}  // namespace hearth::cpu::qk
