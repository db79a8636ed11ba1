// Prefill for Q8, Q4 and Q4-codebook weights on AVX-512 VNNI: the int8 GEMM of
// matmul_quant_gemm.h on 16-lane vectors, panels of 32 rows (two vectors), each repacked per call
// from the codes (by 16x16 dword transposes, or gathers for a short last chunk). vpdpbusd does 64
// multiply-adds where an f32 FMA does 16 (figures: bench/RESULTS.md). Include only from
// *_avx512.cpp files.
#pragma once
#include <cmath>

#include "backends/cpu/matmul_quant_avx512.h"
#include "backends/cpu/matmul_quant_gemm.h"
#include "backends/cpu/simd_avx512.h"

namespace hearth::cpu::qk {
namespace {

// The QuantActFn: as quantize_act_scalar rounds (amax / 127 per block, nearest even; a block with
// a NaN or infinity gets a NaN scale and zero codes, so every dot it enters is NaN), in element
// order. Block b goes to q + 32 b step, d[b step] and sum[b step]: step 1 for one token's row,
// n for n tokens block-interleaved (PanelActs).
inline void quantize_act_blocks_avx512(const float* x, int64_t k, int8_t* q, float* d, int32_t* sum,
                                       int64_t step = 1) {
  const __m512 big = _mm512_set1_ps(3.4028235e38f);
  for (int64_t b = 0; b < k / kBlock; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x + 32 * b), v1 = _mm512_loadu_ps(x + 32 * b + 16);
    const __m512 a0 = _mm512_abs_ps(v0), a1 = _mm512_abs_ps(v1);
    const bool finite =
        (_mm512_cmp_ps_mask(a0, big, _CMP_NLE_UQ) | _mm512_cmp_ps_mask(a1, big, _CMP_NLE_UQ)) == 0;
    const float amax = hmax(_mm512_max_ps(a0, a1));
    const __m512 inv = _mm512_set1_ps(finite && amax > 0.f ? 127.f / amax : 0.f);
    const __m512i i0 = finite ? _mm512_cvtps_epi32(_mm512_mul_ps(v0, inv)) : _mm512_setzero_si512();
    const __m512i i1 = finite ? _mm512_cvtps_epi32(_mm512_mul_ps(v1, inv)) : _mm512_setzero_si512();
    int8_t* qb = q + 32 * b * step;
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qb), _mm512_cvtepi32_epi8(i0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + 16), _mm512_cvtepi32_epi8(i1));
    d[b * step] = finite ? amax / 127.f : NAN;
    sum[b * step] = _mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1));
  }
}

// The GEMM's vector shape (matmul_quant_gemm.h): 16 lanes, 32-row panels, and 6-token register
// tiles: 12 integer and 12 f32 accumulators, two weight vectors and a broadcast fit the 32
// registers; at 8 tokens GCC 12 spilled accumulators to the stack in the inner loop
// (bench/RESULTS.md, "The int8 prefill GEMM's register tile").
struct GemmAvx512 {
  static constexpr int kLanes = 16, kPanelRows = 32, kTileTokens = 6;
  using I = __m512i;
  using F = __m512;
  static F zero() { return _mm512_setzero_ps(); }
  static I set1_i(int32_t v) { return _mm512_set1_epi32(v); }
  static F set1_f(float v) { return _mm512_set1_ps(v); }
  static I load_i(const uint32_t* p) { return _mm512_loadu_si512(p); }
  static F load_f(const float* p) { return _mm512_loadu_ps(p); }
  static I dot(I acc, I u, I s) { return _mm512_dpbusd_epi32(acc, u, s); }
  static F to_f(I v) { return _mm512_cvtepi32_ps(v); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static void store_first(float* y, F v, int64_t n) { _mm512_mask_storeu_ps(y, first_n(n), v); }
  static void quant_act(const float* x, int64_t k, int8_t* q, float* d, int32_t* sum) {
    quantize_act_blocks_avx512(x, k, q, d, sum);
  }
};
constexpr int kPanelRows = GemmAvx512::kPanelRows;

// What every Q8/Q4 AVX-512 fill function sets: the int8 prefill GEMM and its activations.
inline void fill_quant_prefill(KernelTable& k) {
  k.quant_prefill = true;
  k.quant_act = [](const float* x, int64_t n, int8_t* q, float* d, int32_t* sum) {
    quantize_act_blocks_avx512(x, n, q, d, sum);
  };
}

// t[j] = dword j of each of the 16 rows' 64 bytes at p[i] + off, row i in lane i.
inline void transpose16(const uint8_t* const p[16], int64_t off, __m512i t[16]) {
  for (int i = 0; i < 16; ++i) t[i] = _mm512_loadu_si512(p[i] + off);
  transpose16x16(t);
}

// Repacks rows [0, n) (n <= 32) of codes into the panel and their scales into g.scales. A chunk's
// slot lane L of half h holds the natural dword 8b + 4h + q (b = L mod m, q = L / m for a chunk of
// m blocks, quant/FORMAT.md). A full chunk's 16 lanes come from 16 rows at once,
// Codes::lanes16(rows, h0, h1) giving both halves' lanes as unsigned codes (transpose16); a short
// last chunk goes by one gather per lane, Codes::gather(row0, offsets, valid, chunk_byte, m, L,
// &h0, &h1). The codes are row-major (the backend's copies are panels, which the GEMM takes as they
// are: matmul_q4_panel_avx512.h).
template <class Codes, int G>
void pack_panel(const Codes& cd, const uint8_t* codes, int64_t row_bytes, const uint16_t* scales,
                DType st, int64_t k, int n, const GemmActs& g) {
  const int64_t nb = k / kBlock;
  for (int v = 0; v < kPanelRows / 16; ++v) {
    const int rows = int(min64(16, n - 16 * v));
    uint32_t* col = g.panel + 16 * v;
    if (rows <= 0) {  // an absent half of the panel: its results are never stored
      for (int64_t d = 0; d < k / 4; ++d)
        _mm512_storeu_si512(col + d * kPanelRows, _mm512_setzero_si512());
      continue;
    }
    const __mmask16 valid = first_n(rows);
    const __m512i lane = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    // Row i of the 16 starts at i x row_bytes.
    const __m512i offs = _mm512_mullo_epi32(lane, _mm512_set1_epi32(int32_t(row_bytes)));
    const uint8_t* row0 = codes + 16 * v * row_bytes;
    alignas(64) int32_t off[16];
    _mm512_store_si512(off, offs);
    for (int64_t c0 = 0; c0 < k; c0 += kChunk) {
      const int m = int(min64(kChunk, k - c0) / kBlock);
      const int64_t chunk_byte = c0 * Codes::kChunkBytes / kChunk;
      if (m == 4) {  // a full chunk: 16 rows' lanes by one transposition (absent rows: row 0's)
        const uint8_t* at[16];
        for (int i = 0; i < 16; ++i) at[i] = row0 + (i < rows ? off[i] : 0) + chunk_byte;
        __m512i h0[16], h1[16];
        cd.lanes16(at, h0, h1);
        for (int L = 0; L < 16; ++L) {
          const int64_t dw = c0 / 4 + 8 * (L % 4) + L / 4;
          _mm512_storeu_si512(col + dw * kPanelRows, h0[L]);
          _mm512_storeu_si512(col + (dw + 4) * kPanelRows, h1[L]);
        }
        continue;
      }
      for (int L = 0; L < 4 * m; ++L) {
        __m512i h0, h1;
        cd.gather(row0, offs, valid, chunk_byte, m, L, &h0, &h1);
        const int64_t dw = c0 / 4 + 8 * (L % m) + L / m;
        _mm512_storeu_si512(col + dw * kPanelRows, h0);
        _mm512_storeu_si512(col + (dw + 4) * kPanelRows, h1);
      }
    }
    for (int r = 0; r < 16; ++r) {
      const uint16_t* sr = scales + (r < rows ? 16 * v + r : 0) * (k / G);
      for (int64_t b = 0; b < nb; ++b)
        g.scales[b * kPanelRows + 16 * v + r] = scale_f32(st, sr[b * kBlock / G]);
    }
  }
}

// The prefill QuantMatmulFn body: rows [r0, r1) for every token. Scratch: see gemm_acts
// (quant_matmul_scratch_floats covers it from 8 tokens on).
template <class Codes, int G>
void gemm_quant(const QuantMatmulArgs& a, const Codes& cd = Codes()) {
  const int64_t k = a.k, row_bytes = k * Codes::kChunkBytes / kChunk;
  const GemmActs g = gemm_acts<GemmAvx512>(a, Codes::kOffsetLog2);
  const auto* codes = static_cast<const uint8_t*>(a.w);
  const auto* scales = static_cast<const uint16_t*>(a.scales);
  for (int64_t r = a.r0; r < a.r1; r += kPanelRows) {
    const int n = int(min64(kPanelRows, a.r1 - r));
    pack_panel<Codes, G>(cd, codes + r * row_bytes, row_bytes, scales + r * (k / G), a.scale_dtype,
                         k, n, g);
    gemm_tokens<GemmAvx512>(g, k, a.n_tokens, a.y + (r - a.r0), a.ldy, n);
  }
}

}  // namespace
}  // namespace hearth::cpu::qk
