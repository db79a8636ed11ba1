#include "backends/cpu/matmul_quant.h"

#include <cmath>

namespace hearth::cpu::qk {

float* carve_act_tile(float* scratch, int64_t k, ActTile* t) {
  const int64_t nb = k / kBlock;
  t->d = scratch;
  t->s = scratch + kTokenTile * nb;
  t->q = reinterpret_cast<int8_t*>(scratch + 2 * kTokenTile * nb);
  // Codes take k bytes per token; keep what follows 64-byte aligned.
  const int64_t q_floats = (kTokenTile * k / 4 + 15) / 16 * 16;
  return scratch + 2 * kTokenTile * nb + q_floats;
}

void quantize_act_scalar(const float* x, int64_t k, int8_t* q, float* d, float* s) {
  for (int64_t b = 0; b < k / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    float amax = 0.f;
    for (int64_t i = 0; i < kBlock; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
    const float inv = amax > 0.f ? 127.f / amax : 0.f;
    int sum = 0;
    for (int64_t i = 0; i < kBlock; ++i) {
      const int v = int(std::nearbyint(xb[i] * inv));
      q[b * kBlock + i] = int8_t(v);
      sum += v;
    }
    d[b] = amax / 127.f;
    s[b] = float(sum);
  }
}

}  // namespace hearth::cpu::qk
