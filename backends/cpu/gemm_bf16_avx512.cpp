// BF16 prefill GEMM on AVX-512 BF16 over the weights' decode copy as it is: kPackBf16 groups of 16
// rows whose 64-byte line c holds the 16 rows' columns (2c, 2c + 1) as bf16 pairs (kernels.h),
// against activations already rounded to bf16, [T][k] in element order. One vdpbf16ps multiplies a
// line by one token's column pair, broadcast, into the 16 rows' f32 sums in the lanes, so the
// packed rows are never transposed back for a library (which cost a third of the library's own
// time on 128-token steps; bench/RESULTS.md).
#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/simd_avx512.h"

namespace hearth::cpu {

namespace {

// Tokens per register tile: 2 groups x 12 tokens are 24 accumulators, beside the two weight
// lines and a broadcast, within the 32 registers.
constexpr int kTileTokens = 12;

// y[t * ldy + 16 g + i] for G groups (16 rows each, gs weights apart) and NT tokens over all of k:
// each pair of columns is one line per group, multiplied by every token's broadcast pair.
template <int G, int NT>
void gemm_tile(const uint16_t* w, int64_t gs, int64_t k, const uint16_t* x, int64_t ldx, float* y,
               int64_t ldy) {
  __m512 acc[G][NT];
  for (int g = 0; g < G; ++g)
    for (int t = 0; t < NT; ++t) acc[g][t] = _mm512_setzero_ps();
  for (int64_t c = 0; c < k; c += 2) {
    __m512bh wl[G];
    for (int g = 0; g < G; ++g)
      wl[g] = reinterpret_cast<__m512bh>(_mm512_loadu_si512(w + g * gs + 16 * c));
    for (int t = 0; t < NT; ++t) {
      int32_t pair;
      std::memcpy(&pair, x + t * ldx + c, 4);
      const __m512bh xv = reinterpret_cast<__m512bh>(_mm512_set1_epi32(pair));
      for (int g = 0; g < G; ++g) acc[g][t] = _mm512_dpbf16_ps(acc[g][t], wl[g], xv);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int t = 0; t < NT; ++t) _mm512_storeu_ps(y + t * ldy + 16 * g, acc[g][t]);
}

// The last `left` (< kTileTokens) tokens as one tile of exactly that many.
template <int G, int NT = kTileTokens - 1>
void gemm_tail(const uint16_t* w, int64_t gs, int64_t k, const uint16_t* x, int64_t ldx, int left,
               float* y, int64_t ldy) {
  if constexpr (NT > 0) {
    if (left == NT) return gemm_tile<G, NT>(w, gs, k, x, ldx, y, ldy);
    gemm_tail<G, NT - 1>(w, gs, k, x, ldx, left, y, ldy);
  }
}

// Every token against G groups at w: the groups stay in L2 (2 x 16 rows x k bf16: 128 KiB at
// k = 2048) while the tokens pass by in tiles.
template <int G>
void gemm_groups(const uint16_t* w, int64_t k, const uint16_t* x, int64_t ldx, int n_tokens,
                 float* y, int64_t ldy) {
  int t = 0;
  for (; t + kTileTokens <= n_tokens; t += kTileTokens)
    gemm_tile<G, kTileTokens>(w, 16 * k, k, x + t * ldx, ldx, y + t * ldy, ldy);
  gemm_tail<G>(w, 16 * k, k, x + t * ldx, ldx, n_tokens - t, y + t * ldy, ldy);
}

void gemm_bf16_packed_avx512(const void* packed, int64_t k, int64_t r0, int64_t r1,
                             const uint16_t* x, int64_t ldx, int n_tokens, float* y, int64_t ldy) {
  const auto* w = static_cast<const uint16_t*>(packed);
  int64_t r = r0;
  for (; r + 32 <= r1; r += 32) gemm_groups<2>(w + r * k, k, x, ldx, n_tokens, y + (r - r0), ldy);
  if (r < r1) gemm_groups<1>(w + r * k, k, x, ldx, n_tokens, y + (r - r0), ldy);
}

}  // namespace

void fill_gemm_bf16_avx512(KernelTable& k) {
  k.gemm_bf16_packed = gemm_bf16_packed_avx512;
}

}  // namespace hearth::cpu
