// AVX2 pieces shared by matmul_q8_avx2.cpp and matmul_q4_avx2.cpp; include only from *_avx2.cpp
// files (anonymous namespace: no AVX2 code may become the copy a lower-ISA file links against).
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

}  // namespace
}  // namespace hearth::cpu::qk
