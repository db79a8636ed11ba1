// Q4 matmul, AVX2: rows of 128-element chunks of 64 bytes, byte j holding elements j (low nibble)
// and j + 64 (high nibble) as q + 8 (quant/FORMAT.md). Each 32-byte half of a chunk gives two
// blocks of 32 nibbles, multiplied with int8 activations by maddubs; the +8 is removed per block.
#include "backends/cpu/matmul_quant_avx2.h"

namespace hearth::cpu {

namespace {

using namespace qk;

constexpr int64_t kChunk = 128;

void matmul_q4_avx2(const QuantMatmulArgs& a) {
  const int64_t k = a.k, nb = k / kBlock, ng = k / a.group, kc = k / kChunk * kChunk;
  const int per_group = a.group / int(kBlock);
  ActTile at;
  float* sw = carve_act_tile(a.scratch, k, &at);
  float* P = sw + (ng + 15) / 16 * 16;
  const auto* codes = static_cast<const uint8_t*>(a.w);
  const auto* scales = static_cast<const uint16_t*>(a.scales);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  for (int t0 = 0; t0 < a.n_tokens; t0 += kTokenTile) {
    const int nt = int(min64(kTokenTile, a.n_tokens - t0));
    for (int t = 0; t < nt; ++t)
      quantize_act_scalar(a.x + (t0 + t) * a.ldx, k, at.q + t * k, at.d + t * nb, at.s + t * nb);
    for (int64_t r = a.r0; r < a.r1; ++r) {
      const uint8_t* w = codes + r * (k / 2);
      for (int64_t g = 0; g < ng; ++g) sw[g] = scale_f32(a.scale_dtype, scales[r * ng + g]);
      for (int t = 0; t < nt; ++t) {
        const int8_t* xq = at.q + t * k;
        const float corr = block_products(at.d + t * nb, at.s + t * nb, sw, nb, per_group, P);
        __m256 acc = _mm256_setzero_ps();
        for (int64_t c0 = 0; c0 < kc; c0 += kChunk) {
          const int64_t b0 = c0 / kBlock;
          for (int h = 0; h < 2; ++h) {  // bytes 32h..32h+31: blocks b0 + h (low), b0 + 2 + h (high)
            const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + c0 / 2 + 32 * h));
            const __m256i lo = _mm256_and_si256(v, m4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            const __m256i xl = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + c0 + 32 * h));
            const __m256i xh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + c0 + 64 + 32 * h));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8s8(lo, xl)), _mm256_set1_ps(P[b0 + h]), acc);
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_u8s8(hi, xh)), _mm256_set1_ps(P[b0 + 2 + h]), acc);
          }
        }
        float dot = hsum8(acc);
        if (kc < k) {  // a last, shorter chunk: its nibbles split at half its length
          const int64_t half = (k - kc) / 2;
          const uint8_t* s = w + kc / 2;
          int32_t isum[4] = {0, 0, 0, 0};
          for (int64_t j = 0; j < half; ++j) {
            isum[j / kBlock] += int32_t(s[j] & 15) * xq[kc + j];
            isum[(j + half) / kBlock] += int32_t(s[j] >> 4) * xq[kc + j + half];
          }
          for (int64_t b = 0; b < (k - kc) / kBlock; ++b) dot += P[kc / kBlock + b] * float(isum[b]);
        }
        a.y[(t0 + t) * a.ldy + (r - a.r0)] = dot - 8.f * corr;
      }
    }
  }
}

}  // namespace

void fill_matmul_q4_avx2(KernelTable& k) { k.matmul_q4 = matmul_q4_avx2; }

}  // namespace hearth::cpu
