// Q8 matmul, AVX2: 128-element chunks of 128 bytes in slot order (quant/FORMAT.md), 4-byte lane i
// in block i mod 4, against int8 activations in the same slot order, 32 bytes at a time with
// maddubs on |code| and the activation carrying the code's sign; one broadcast of the chunk's 4
// block factors scales the lanes.
#include "backends/cpu/matmul_quant_avx2.h"

namespace hearth::cpu {

namespace {

using namespace qk;

void matmul_q8_avx2(const QuantMatmulArgs& a) {
  const int64_t k = a.k, nb = k / kBlock, ng = k / a.group, nc = k / kChunk, kc = nc * kChunk;
  const int per_group = a.group / int(kBlock);
  ActTile at;
  float* sw = carve_act_tile(a.scratch, k, &at);
  float* P = sw + (ng + 15) / 16 * 16;
  const auto* codes = static_cast<const int8_t*>(a.w);
  const auto* scales = static_cast<const uint16_t*>(a.scales);
  auto ld = [](const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); };
  auto dot32 = [&](const int8_t* w, const int8_t* x) {
    const __m256i wv = ld(w);
    return dot_u8s8(_mm256_abs_epi8(wv), _mm256_sign_epi8(ld(x), wv));
  };
  for (int t0 = 0; t0 < a.n_tokens; t0 += kTokenTile) {
    const int nt = int(min64(kTokenTile, a.n_tokens - t0));
    for (int t = 0; t < nt; ++t)
      quantize_act_scalar(a.x + (t0 + t) * a.ldx, k, at.q + t * k, at.d + t * nb, at.s + t * nb);
    for (int64_t r = a.r0; r < a.r1; ++r) {
      const int8_t* w = codes + r * k;
      for (int64_t g = 0; g < ng; ++g) sw[g] = scale_f32(a.scale_dtype, scales[r * ng + g]);
      for (int t = 0; t < nt; ++t) {
        const int8_t* xq = at.q + t * k;
        const float corr = block_products(at.d + t * nb, at.s + t * nb, sw, nb, per_group, P);
        __m256 acc = _mm256_setzero_ps();
        for (int64_t j = 0; j < nc; ++j) {
          const int8_t* c = w + j * kChunk;
          const int8_t* x = xq + j * kChunk;
          const __m256i s =
              _mm256_add_epi32(_mm256_add_epi32(dot32(c, x), dot32(c + 32, x + 32)),
                               _mm256_add_epi32(dot32(c + 64, x + 64), dot32(c + 96, x + 96)));
          const __m256 f = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(P + 4 * j));
          acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), f, acc);
        }
        float dot = hsum8(acc);
        if (kc < k) {  // a shorter last chunk: its dots use q + 128, so the offset goes too
          const int m = int((k - kc) / kBlock);
          int32_t isum[4];
          tail_block_dots(8, reinterpret_cast<const uint8_t*>(w + kc), xq + kc, m, isum);
          for (int b = 0; b < m; ++b) dot += P[kc / kBlock + b] * float(isum[b]);
          for (int b = 0; b < m; ++b)
            dot -= 128.f * P[kc / kBlock + b] * at.s[t * nb + kc / kBlock + b];
        }
        (void)corr;  // the vector part is exact signed arithmetic: no offset to remove
        a.y[(t0 + t) * a.ldy + (r - a.r0)] = dot;
      }
    }
  }
}

}  // namespace

void fill_matmul_q8_avx2(KernelTable& k) {
  k.matmul_q8 = matmul_q8_avx2;
}

}  // namespace hearth::cpu
