// The coded BF16 matmul's walk over rows (bf16_coded.h) for kernels of up to 4 tokens a pass
// (AVX2, NEON): one token on two groups at a time (two streams), several tokens on one group four
// at a time (from cache after the first four). Kernel::block<G, NT>(w, gb, k, x, ldx, y, ldy)
// multiplies G groups (gb bytes apart, from w) by NT tokens. Anonymous namespace: each ISA's file
// instantiates it with its own flags.
#pragma once
#include "backends/cpu/bf16_coded.h"
#include "backends/cpu/kernels.h"

namespace hearth::cpu {
namespace {

// Tokens [t0, t0 + n) (n <= NT) against one group, as one call of exactly n.
template <class Kernel, int NT = 4>
inline void coded_group_tokens(const uint8_t* w, int64_t gb, int64_t k, const float* x, int64_t ldx,
                               int n, float* y, int64_t ldy) {
  if constexpr (NT > 0) {
    if (n == NT) return Kernel::template block<1, NT>(w, gb, k, x, ldx, y, ldy);
    coded_group_tokens<Kernel, NT - 1>(w, gb, k, x, ldx, n, y, ldy);
  }
}

// Rows [r0, r1) (whole groups) of the coded groups at a.w_il.
template <class Kernel>
void coded_rows_in_fours(const MatmulArgs& a) {
  const auto* groups = static_cast<const uint8_t*>(a.w_il);
  const int64_t gb = coded_group_bytes(a.k);
  for (int64_t r = a.r0; r < a.r1;) {
    const uint8_t* w = groups + r / kCodedRows * gb;
    float* y = a.y + (r - a.r0);
    if (a.n_tokens == 1 && r + 2 * kCodedRows <= a.r1) {
      Kernel::template block<2, 1>(w, gb, a.k, a.x, a.ldx, y, a.ldy);
      r += 2 * kCodedRows;
      continue;
    }
    for (int t = 0; t < a.n_tokens; t += 4)
      coded_group_tokens<Kernel>(w, gb, a.k, a.x + t * a.ldx, a.ldx,
                                 a.n_tokens - t < 4 ? a.n_tokens - t : 4, y + t * a.ldy, a.ldy);
    r += kCodedRows;
  }
}

}  // namespace
}  // namespace hearth::cpu
