// AVX2 pieces shared by the Q8, Q4 and Q4-codebook kernels; include only from *_avx2.cpp files
// (anonymous namespace: no AVX2 code may become the copy a lower-ISA file links against).
#pragma once
#include <immintrin.h>

#include <cstring>

#include "backends/cpu/matmul_quant.h"

namespace hearth::cpu::qk {
namespace {

inline int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

inline float scale_f32(DType t, uint16_t s) {
  if (t == DType::BF16) {
    const uint32_t u = uint32_t(s) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  return _cvtsh_ss(s);
}

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// 8 int32 sums of 4 adjacent u8 * s8 products (the AVX2 stand-in for vpdpbusd); each pair sum
// stays below 2^15 because one operand is at most 15 (Q4 nibbles) or 128 (|Q8 code|).
inline __m256i dot_u8s8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// P[b] = dx[b] * scale of block b's group, for one (row, token); returns sum_b P[b] * sx[b].
inline float block_products(const float* dx, const float* sx, const float* sw, int64_t nb,
                            int per_group, float* P) {
  float c = 0.f;
  for (int64_t b = 0; b < nb; ++b) {
    P[b] = dx[b] * sw[b / per_group];
    c += P[b] * sx[b];
  }
  return c;
}

inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// Decode and prefill: token tiles of activations quantized in slot order, each row's group scales
// widened once, then per (row, token) one pass over the chunks, each chunk's 8 lane dots scaled by
// one broadcast of its 4 block factors. Codes provides kChunkBytes (per 128 elements), dot(chunk,
// x) -> the chunk's 8 int32 lane dots (lane i: block i mod 4), kVecOffset (the unsigned offset
// those dots still carry: Q4's +8; 0 where they are exact signed dots), and tail(chunk, x, m, isum)
// with kTailOffset, the same for a short last chunk of m blocks (tail_block_dots).
template <class Codes>
void matmul_quant_avx2(const QuantMatmulArgs& a, const Codes& cd) {
  const int64_t k = a.k, nb = k / kBlock, ng = k / a.group, nc = k / kChunk, kc = nc * kChunk;
  const int64_t row_bytes = k * Codes::kChunkBytes / kChunk;
  const int per_group = a.group / int(kBlock);
  ActTile at;
  float* sw = carve_act_tile(a.scratch, k, &at);
  float* P = sw + (ng + 15) / 16 * 16;
  const auto* codes = static_cast<const uint8_t*>(a.w);
  const auto* scales = static_cast<const uint16_t*>(a.scales);
  for (int t0 = 0; t0 < a.n_tokens; t0 += kTokenTile) {
    const int nt = int(min64(kTokenTile, a.n_tokens - t0));
    for (int t = 0; t < nt; ++t)
      quantize_act_scalar(a.x + (t0 + t) * a.ldx, k, at.q + t * k, at.d + t * nb, at.s + t * nb);
    for (int64_t r = a.r0; r < a.r1; ++r) {
      const uint8_t* w = codes + r * row_bytes;
      for (int64_t g = 0; g < ng; ++g) sw[g] = scale_f32(a.scale_dtype, scales[r * ng + g]);
      for (int t = 0; t < nt; ++t) {
        const int8_t* xq = at.q + t * k;
        const float* sx = at.s + t * nb;
        const float corr = block_products(at.d + t * nb, sx, sw, nb, per_group, P);
        __m256 acc = _mm256_setzero_ps();
        for (int64_t j = 0; j < nc; ++j) {
          const __m256i s = cd.dot(w + j * Codes::kChunkBytes, xq + j * kChunk);
          const __m256 f = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(P + 4 * j));
          acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), f, acc);
        }
        float dot = hsum8(acc);
        if (kc < k) {  // a shorter last chunk, whose offset differs from the vector part's
          const int m = int((k - kc) / kBlock);
          int32_t isum[4];
          cd.tail(w + nc * Codes::kChunkBytes, xq + kc, m, isum);
          constexpr float kExtra = float(Codes::kTailOffset - Codes::kVecOffset);
          for (int b = 0; b < m; ++b)
            dot += P[kc / kBlock + b] * (float(isum[b]) - kExtra * sx[kc / kBlock + b]);
        }
        a.y[(t0 + t) * a.ldy + (r - a.r0)] = dot - float(Codes::kVecOffset) * corr;
      }
    }
  }
}

}  // namespace
}  // namespace hearth::cpu::qk
