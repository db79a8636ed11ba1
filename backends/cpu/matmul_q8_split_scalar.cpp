// A Q8 LM head kept as its screen and low bits (head_screen.h), row by row in double: each row's
// codes rebuilt (split_row_codes) and dotted block by block with the int8 activations, as the Q8
// kernels multiply them. The reference the SIMD kernel is checked against.
#include <vector>

#include "backends/cpu/head_screen.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/matmul_quant.h"
#include "core/quant_format.h"

namespace hearth::cpu {

using namespace qk;

void matmul_q8_split_scalar(const QuantMatmulArgs& a) {
  const int64_t k = a.k, nb = k / kBlock, ng = k / a.group;
  HeadScreen s;
  s.hi = static_cast<const uint8_t*>(a.w);
  s.lo = static_cast<const uint8_t*>(a.w_il);
  const auto* scales = static_cast<const uint16_t*>(a.scales);
  std::vector<int8_t> codes(static_cast<size_t>(k)), xq(static_cast<size_t>(k));
  std::vector<float> xd(static_cast<size_t>(nb)), xs(static_cast<size_t>(nb));
  for (int t = 0; t < a.n_tokens; ++t) {
    quantize_act_scalar(a.x + t * a.ldx, k, xq.data(), xd.data(), xs.data());
    for (int64_t r = a.r0; r < a.r1; ++r) {
      split_row_codes(s, k, r, codes.data());
      double y = 0;
      for (int64_t j = 0; j < k / kChunk; ++j) {
        int64_t dot[4] = {};  // slot lane p / 4 of either half belongs to block lane mod 4
        for (int64_t p = 0; p < kChunk; ++p)
          dot[(p % 64) / 4 % 4] +=
              int64_t(codes[size_t(kChunk * j + p)]) * xq[size_t(kChunk * j + p)];
        for (int b = 0; b < 4; ++b) {
          const int64_t blk = 4 * j + b;
          y += quant::scale_to_f32(a.scale_dtype, scales[r * ng + blk * kBlock / a.group]) *
               double(xd[size_t(blk)]) * double(dot[b]);
        }
      }
      a.y[t * a.ldy + (r - a.r0)] = float(y);
    }
  }
}

}  // namespace hearth::cpu
