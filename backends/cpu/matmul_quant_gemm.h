// The int8 prefill GEMM's ISA-independent part, written once over a vector shape V
// (matmul_quant_gemm_avx512.h: 16 lanes, matmul_quant_gemm_avxvnni.h: 8): panels of V::kPanelRows
// weight rows repacked as [k / 4][kPanelRows] dwords of 4 unsigned codes (q + offset), int8
// activations in element order with one scale and code sum per 32-element block, and vpdpbusd
// with V::kLanes rows in the lanes of a vector and one token's 4 activation codes broadcast.
// Integer dots stay exact within a block; each block's total is scaled by (weight scale x
// activation scale) into f32 accumulators. Include only from the ISA headers above.
//
// V provides kLanes, kPanelRows (1 or 2 vectors), kTileTokens (tokens per register tile), the
// vector types I and F, and static zero(), set1_i(int32_t), set1_f(float), load_i(const uint32_t*),
// load_f(const float*), dot(I acc, I u8, I s8) (vpdpbusd), to_f(I), mul(F, F), fmadd(F, F, F),
// store_first(float* y, F v, int64_t n) (lanes [0, n) of v), and quant_act, the QuantActFn.
#pragma once
#include <cstring>

#include "backends/cpu/matmul_quant.h"

namespace hearth::cpu::qk {
namespace {

// The activations of every token of the step: codes [T][k] in element order, block scales and
// block code sums [T][k / 32] (the caller's shared ones, QuantMatmulArgs::xq, or quantized into
// the scratch), and this thread's panel in the scratch.
struct GemmActs {
  const int8_t* q;
  const float* d;
  const int32_t* sum;
  uint32_t* panel;  // [k / 4][kPanelRows] repacked codes
  float* scales;    // [k / 32][kPanelRows] f32 weight scale of each (block, row)
  int offset_log2;  // of the weights' unsigned codes (Codes::kOffsetLog2)
};

// The panel in the scratch, and the activations: the caller's shared ones, else quantized here
// after the panel (unless reuse_x: this thread's previous call left them there).
template <class V>
GemmActs gemm_acts(const QuantMatmulArgs& a, int offset_log2) {
  const int64_t k = a.k, nb = k / kBlock;
  auto round64 = [](int64_t bytes) { return (bytes + 63) / 64 * 64; };
  auto* p = reinterpret_cast<char*>(a.scratch);
  GemmActs g;
  g.offset_log2 = offset_log2;
  g.panel = reinterpret_cast<uint32_t*>(p), p += round64(V::kPanelRows * k);
  g.scales = reinterpret_cast<float*>(p), p += round64(V::kPanelRows * nb * 4);
  if (a.xq) {
    g.q = a.xq, g.d = a.xd, g.sum = a.xsum;
    return g;
  }
  auto* d = reinterpret_cast<float*>(p);
  p += round64(a.n_tokens * nb * 4);
  auto* sum = reinterpret_cast<int32_t*>(p);
  p += round64(a.n_tokens * nb * 4);
  auto* q = reinterpret_cast<int8_t*>(p);
  for (int t = 0; t < a.n_tokens && !a.reuse_x; ++t)
    V::quant_act(a.x + t * a.ldx, k, q + t * k, d + t * nb, sum + t * nb);
  g.q = q, g.d = d, g.sum = sum;
  return g;
}

// y[t][kLanes v + i] for NV vectors of panel rows and NT tokens over the whole of k. The codes
// carry the unsigned offset 2^g.offset_log2, cancelled exactly by starting each block's integer
// dot at -(offset x the block's activation code sum).
template <class V, int NV, int NT>
inline void gemm_tile(const GemmActs& g, int64_t k, int t0, float* y, int64_t ldy, int n) {
  using I = typename V::I;
  using F = typename V::F;
  constexpr int P = V::kPanelRows, L = V::kLanes;
  const int64_t nb = k / kBlock;
  F out[NT][NV];
  for (int t = 0; t < NT; ++t)
    for (int v = 0; v < NV; ++v) out[t][v] = V::zero();
  const int8_t* xq = g.q + t0 * k;
  const int32_t* sum = g.sum + t0 * nb;
  const float* dx = g.d + t0 * nb;
  for (int64_t b = 0; b < nb; ++b) {
    I acc[NT][NV];
    for (int t = 0; t < NT; ++t)
      for (int v = 0; v < NV; ++v) acc[t][v] = V::set1_i(-sum[t * nb + b] * (1 << g.offset_log2));
    const uint32_t* p = g.panel + b * 8 * P;
    for (int kk = 0; kk < 8; ++kk) {
      I w[NV];
      for (int v = 0; v < NV; ++v) w[v] = V::load_i(p + kk * P + L * v);
      for (int t = 0; t < NT; ++t) {
        int32_t x4;
        std::memcpy(&x4, xq + t * k + 32 * b + 4 * kk, 4);
        const I xv = V::set1_i(x4);
        for (int v = 0; v < NV; ++v) acc[t][v] = V::dot(acc[t][v], w[v], xv);
      }
    }
    for (int v = 0; v < NV; ++v) {
      const F sw = V::load_f(g.scales + b * P + L * v);
      for (int t = 0; t < NT; ++t)
        out[t][v] = V::fmadd(V::to_f(acc[t][v]), V::mul(sw, V::set1_f(dx[t * nb + b])), out[t][v]);
    }
  }
  for (int t = 0; t < NT; ++t)
    for (int v = 0; v < NV; ++v) V::store_first(y + t * ldy + L * v, out[t][v], n - L * v);
}

// The last `left` (< kTileTokens) tokens as one tile of exactly that many.
template <class V, int NV, int NT = V::kTileTokens - 1>
inline void gemm_tail(const GemmActs& g, int64_t k, int t, int left, float* y, int64_t ldy, int n) {
  if constexpr (NT > 0) {
    if (left == NT) return gemm_tile<V, NV, NT>(g, k, t, y, ldy, n);
    gemm_tail<V, NV, NT - 1>(g, k, t, left, y, ldy, n);
  }
}

// Every token against the panel's first n rows, one vector of rows when they fit in one.
template <class V>
inline void gemm_tokens(const GemmActs& g, int64_t k, int n_tokens, float* y, int64_t ldy, int n) {
  static_assert(V::kPanelRows == 2 * V::kLanes, "a panel is two vectors of rows");
  constexpr int T = V::kTileTokens;
  int t = 0;
  if (n > V::kLanes) {
    for (; t + T <= n_tokens; t += T) gemm_tile<V, 2, T>(g, k, t, y + t * ldy, ldy, n);
    gemm_tail<V, 2>(g, k, t, n_tokens - t, y + t * ldy, ldy, n);
    return;
  }
  for (; t + T <= n_tokens; t += T) gemm_tile<V, 1, T>(g, k, t, y + t * ldy, ldy, n);
  gemm_tail<V, 1>(g, k, t, n_tokens - t, y + t * ldy, ldy, n);
}

}  // namespace
}  // namespace hearth::cpu::qk
