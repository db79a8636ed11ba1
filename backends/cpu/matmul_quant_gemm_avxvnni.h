// Prefill for Q8, Q4 and Q4-codebook weights on AVX-VNNI (AVX2 machines since Intel Alder Lake,
// and Zen 5 held to AVX2): the int8 GEMM of matmul_quant_gemm.h on 8-lane vectors and the 256-bit
// vpdpbusd, panels of 16 rows (two vectors), each repacked per call from the codes by 8x8 dword
// transposes. It replaces the f32 library GEMM on dequantized rows, which does a quarter of the
// multiply-adds per instruction. Include only from *_avxvnni.cpp files.
#pragma once
#include <cmath>

#include "backends/cpu/matmul_panel_avx2.h"
#include "backends/cpu/matmul_quant_avx2.h"
#include "backends/cpu/matmul_quant_gemm.h"
#include "backends/cpu/peak_chains.h"
#include "backends/cpu/simd_avx2.h"

namespace hearth::cpu::qk {
namespace {

// The 8 int32 lane dots of one 128-element chunk, u[i] (unsigned) against s[i] (signed), in two
// chains of two vpdpbusd: one chain of four waits on their latency (the Q8 decode loop alone, in
// cache: 52 -> 70 GB/s on one Zen 5 thread).
inline __m256i dpbusd_chunk(const __m256i u[4], const __m256i s[4]) {
  const __m256i z = _mm256_setzero_si256();
  const __m256i a = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(z, u[0], s[0]), u[2], s[2]);
  const __m256i b = _mm256_dpbusd_avx_epi32(_mm256_dpbusd_avx_epi32(z, u[1], s[1]), u[3], s[3]);
  return _mm256_add_epi32(a, b);
}

// The int8 peak loop of these tables: the 256-bit vpdpbusd, 32 multiply-adds each.
inline float dot_i8_loop_avxvnni(int64_t iters, double* ops) {
  const __m256i u = _mm256_set1_epi8(3), v = _mm256_set1_epi8(-2);
  const __m256i s = run_chains<16>(
      iters, [](int j) { return _mm256_set1_epi32(j); },
      [&](__m256i a) { return _mm256_dpbusd_avx_epi32(a, u, v); },
      [](__m256i a, __m256i b) { return _mm256_add_epi32(a, b); });
  *ops = double(iters) * 16 * 32 * 2;
  // The chains wrap (vpdpbusd does); summed as unsigned, so the reduction wraps too, not UB.
  uint32_t lanes[8], sum = 0;
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes), s);
  for (uint32_t l : lanes) sum += l;
  return float(int32_t(sum));
}

// The GEMM's vector shape (matmul_quant_gemm.h): 8 lanes, 16-row panels, and 3-token register
// tiles: 6 integer and 6 f32 accumulators, two weight vectors and a broadcast, 15 of the 16
// registers.
struct GemmAvxVnni {
  static constexpr int kLanes = 8, kPanelRows = 16, kTileTokens = 3;
  using I = __m256i;
  using F = __m256;
  static F zero() { return _mm256_setzero_ps(); }
  static I set1_i(int32_t v) { return _mm256_set1_epi32(v); }
  static F set1_f(float v) { return _mm256_set1_ps(v); }
  static I load_i(const uint32_t* p) { return load256(p); }
  static F load_f(const float* p) { return _mm256_loadu_ps(p); }
  static I dot(I acc, I u, I s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
  static F to_f(I v) { return _mm256_cvtepi32_ps(v); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static void store_first(float* y, F v, int64_t n) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    _mm256_maskstore_ps(y, _mm256_cmpgt_epi32(_mm256_set1_epi32(int32_t(n)), lane), v);
  }
  static void quant_act(const float* x, int64_t k, int8_t* q, float* d, int32_t* sum) {
    quantize_act_blocks_avx2(x, k, q, d, sum);
  }
};
constexpr int kPanelRows = GemmAvxVnni::kPanelRows;

// What every Q8/Q4 AVX-VNNI fill function sets: the int8 prefill GEMM, its activations and peak.
inline void fill_quant_prefill(KernelTable& k) {
  k.quant_prefill = true;
  k.quant_act = [](const float* x, int64_t n, int8_t* q, float* d, int32_t* sum) {
    quantize_act_blocks_avx2(x, n, q, d, sum);
  };
  k.dot_i8_loop = dot_i8_loop_avxvnni;
}

// t[j] = dword j of each of the 8 rows' 32 bytes at p[i] + off, row i in lane i.
inline void transpose8(const uint8_t* const p[8], int64_t off, __m256i t[8]) {
  for (int i = 0; i < 8; ++i) t[i] = load256(p[i] + off);
  transpose8x8(t);
}

// Repacks rows [r, r + n) (n <= 16) into the panel and their scales into g.scales. Slot lane L of
// half h of a chunk of m blocks holds the natural dword 8b + 4h + q (b = L mod m, q = L / m;
// quant/FORMAT.md). Full chunks go 8 rows x 8 lanes at a time: Codes::lanes8(rows, L0, h0,
// h1) gives lanes L0 .. L0 + 7 of both halves as unsigned codes, one vector of the 8 rows per
// lane (transpose8); a short last chunk goes a lane at a time (Codes::dwords). Rows past n repeat
// the last one with zero scales: their results are never stored. The codes are row-major (the
// backend's copies are panels, which PanelGemm takes as they are).
template <class Codes>
void pack_panel(const Codes& cd, const uint8_t* codes, const uint16_t* scales, DType st, int group,
                int64_t k, int64_t r, int n, const GemmActs& g) {
  const int64_t row_bytes = k * Codes::kChunkBytes / kChunk;
  const int64_t nb = k / kBlock;
  for (int v = 0; v < (n + 7) / 8; ++v) {
    const uint8_t* rows[8];
    for (int c0 = 0; c0 < k; c0 += int(kChunk)) {
      for (int i = 0; i < 8; ++i)
        rows[i] =
            codes + (r + min64(8 * v + i, n - 1)) * row_bytes + c0 / kChunk * Codes::kChunkBytes;
      uint32_t* col = g.panel + 8 * v;
      if (c0 + kChunk <= k) {
        for (int L0 = 0; L0 < 16; L0 += 8) {
          __m256i h0[8], h1[8];
          cd.lanes8(rows, L0, h0, h1);
          for (int j = 0; j < 8; ++j) {
            const int L = L0 + j;
            const int64_t dw = c0 / 4 + 8 * (L % 4) + L / 4;
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(col + dw * kPanelRows), h0[j]);
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(col + (dw + 4) * kPanelRows), h1[j]);
          }
        }
        continue;
      }
      const int m = int((k - c0) / kBlock);
      for (int i = 0; i < 8; ++i)
        for (int L = 0; L < 4 * m; ++L) {
          uint32_t h0, h1;
          cd.dwords(rows[i], m, L, &h0, &h1);
          const int64_t dw = c0 / 4 + 8 * (L % m) + L / m;
          col[dw * kPanelRows + i] = h0;
          col[(dw + 4) * kPanelRows + i] = h1;
        }
    }
    for (int i = 8 * v; i < 8 * v + 8; ++i)
      for (int64_t b = 0; b < nb; ++b)
        g.scales[b * kPanelRows + i] =
            i < n ? scale_f32(st, scales[(r + i) * (k / group) + b * kBlock / group]) : 0.f;
  }
}

// The prefill QuantMatmulFn body: rows [r0, r1) for every token. Scratch: see gemm_acts
// (quant_matmul_scratch_floats covers it).
template <class Codes>
void gemm_quant(const QuantMatmulArgs& a, const Codes& cd = Codes()) {
  const int64_t k = a.k;
  const GemmActs g = gemm_acts<GemmAvxVnni>(a, Codes::kOffsetLog2);
  const auto* codes = static_cast<const uint8_t*>(a.w);
  const auto* scales = static_cast<const uint16_t*>(a.scales);
  for (int64_t r = a.r0; r < a.r1; r += kPanelRows) {
    const int n = int(min64(kPanelRows, a.r1 - r));
    pack_panel(cd, codes, scales, a.scale_dtype, a.group, k, r, n, g);
    gemm_tokens<GemmAvxVnni>(g, k, a.n_tokens, a.y + (r - a.r0), a.ldy, n);
  }
}

// matmul_avx2_panels' gemm for a panel copy of format f: a long step's whole groups through the
// int8 GEMM, each group one GEMM panel taken from the copy as it is; false for a short step.
template <class F>
struct PanelGemm {
  F f;
  template <int G, DType ST>
  bool operator()(const QuantMatmulArgs& a, int64_t g0, int64_t g1, std::integral_constant<int, G>,
                  std::integral_constant<DType, ST>) const {
    if (a.n_tokens < kPrefillTokens) return false;
    // The activations where the rows from w (gemm_quant) left them, if they ran: the same carve.
    const GemmActs g = gemm_acts<GemmAvxVnni>(a, F::kOffsetLog2);
    const auto* panel = static_cast<const uint8_t*>(a.w_il);
    const int64_t gb = a.k / kChunk * chunk_bytes<F, G>();
    for (int64_t r = g0; r < g1; r += kPanelRows) {
      panel_for_gemm_avx2<F, G, ST, kPanelRows>(f, panel + r / kPanelRows * gb, a.k, g.panel,
                                                g.scales);
      gemm_tokens<GemmAvxVnni>(g, a.k, a.n_tokens, a.y + (r - a.r0), a.ldy, int(kPanelRows));
    }
    return true;
  }
};

}  // namespace
}  // namespace hearth::cpu::qk
