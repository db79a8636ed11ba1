// Q8 matmul, AVX2: int8 codes row-major [rows, k] (quant/FORMAT.md) against int8 activations,
// 32 at a time with maddubs on |code| and the activation carrying the code's sign.
#include "backends/cpu/matmul_quant_avx2.h"

namespace hearth::cpu {

namespace {

using namespace qk;

void matmul_q8_avx2(const QuantMatmulArgs& a) {
  const int64_t k = a.k, nb = k / kBlock, ng = k / a.group;
  const int per_group = a.group / int(kBlock);
  ActTile at;
  float* sw = carve_act_tile(a.scratch, k, &at);
  float* P = sw + (ng + 15) / 16 * 16;
  const auto* codes = static_cast<const int8_t*>(a.w);
  const auto* scales = static_cast<const uint16_t*>(a.scales);
  for (int t0 = 0; t0 < a.n_tokens; t0 += kTokenTile) {
    const int nt = int(min64(kTokenTile, a.n_tokens - t0));
    for (int t = 0; t < nt; ++t)
      quantize_act_scalar(a.x + (t0 + t) * a.ldx, k, at.q + t * k, at.d + t * nb, at.s + t * nb);
    for (int64_t r = a.r0; r < a.r1; ++r) {
      const int8_t* w = codes + r * k;
      for (int64_t g = 0; g < ng; ++g) sw[g] = scale_f32(a.scale_dtype, scales[r * ng + g]);
      for (int t = 0; t < nt; ++t) {
        const int8_t* xq = at.q + t * k;
        block_products(at.d + t * nb, at.s + t * nb, sw, nb, per_group, P);
        __m256 acc = _mm256_setzero_ps();
        for (int64_t b = 0; b < nb; ++b) {
          const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + b * kBlock));
          const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * kBlock));
          const __m256i d = dot_u8s8(_mm256_abs_epi8(wv), _mm256_sign_epi8(xv, wv));
          acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(d), _mm256_set1_ps(P[b]), acc);
        }
        a.y[(t0 + t) * a.ldy + (r - a.r0)] = hsum8(acc);
      }
    }
  }
}

}  // namespace

void fill_matmul_q8_avx2(KernelTable& k) { k.matmul_q8 = matmul_q8_avx2; }

}  // namespace hearth::cpu
