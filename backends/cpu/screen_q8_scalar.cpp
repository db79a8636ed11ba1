// The screen of a Q8 LM head (layout and bound in head_screen.h), element by element in
// double: the reference the SIMD screen is checked against.
#include <cmath>

#include "backends/cpu/head_screen.h"
#include "backends/cpu/matmul_quant.h"
#include "core/quant_format.h"

namespace hearth::cpu {

using namespace qk;

void screen_q8_scalar(const ScreenQ8Args& a) {
  constexpr int B = kScreenQ8Bits, kStep = 1 << (8 - B);
  constexpr double kMid = (kStep - 1) / 2.0;
  const int64_t k = a.k, nc = k / kChunk, ng = k / a.group;
  ActTile at;
  carve_act_tile(a.scratch, k, &at);
  if (!a.reuse_x) quantize_act_scalar(a.x, k, at.q, at.d, at.s);
  const auto* scales = static_cast<const uint16_t*>(a.scales);
  for (int64_t r = a.r0; r < a.r1; ++r) {
    double est = 0, t = 0;
    for (int64_t j = 0; j < nc; ++j) {
      double e[4] = {}, ax[4] = {};  // per block of the chunk: sum (kStep h + kMid) x', sum |x'|
      const uint8_t* c = a.codes + (r / 4 * 4) * (nc * kScreenQ8ChunkBytes) +
                         (4 * j + r % 4) * kScreenQ8ChunkBytes;
      for (int h = 0; h < 2; ++h) {
        for (int p = 0; p < 64; ++p) {
          const int high = (c[64 + p % 16] >> (4 * h + p / 16)) & 1;
          const int v = ((c[p] >> (4 * h)) & 15) | high << 4;
          const int b = (p / 4) % 4;  // slot lane p / 4 belongs to block lane mod 4
          const int xq = at.q[j * kChunk + 64 * h + p];
          e[b] += (kStep * (v - (1 << (B - 1))) + kMid) * xq;
          ax[b] += std::abs(xq);
        }
      }
      for (int b = 0; b < 4; ++b) {
        const int64_t blk = 4 * j + b;
        const double s =
            quant::scale_to_f32(a.scale_dtype, scales[r * ng + blk * kBlock / a.group]);
        est += s * at.d[blk] * e[b];
        t += std::fabs(s) * at.d[blk] * ax[b];
      }
    }
    a.est[r - a.r0] = float(est);
    a.hw[r - a.r0] = float(t * (kMid + double(nc + 8) / 32768));
  }
}

}  // namespace hearth::cpu
