// AVX2 helpers shared by the AVX2 kernel files (8 f32 lanes). Anonymous namespace: each including
// file gets its own copy compiled with its own flags.
#pragma once
#include <immintrin.h>

namespace hearth::cpu {
namespace {

// e^x with Cephes' expf polynomial on x - n ln2 and 2^n built in the exponent bits; relative error
// about 2e-7, exactly 0 below -87.3 (where 2^n would leave the normal range).
inline __m256 exp256(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.3f);
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.f)));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}

inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

inline float hmax256(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// a[i][j] -> a[j][i] for 8 vectors of 8 dwords: 32- then 64-bit unpacks within 128-bit lanes,
// then the lanes' halves exchanged.
inline void transpose8x8(__m256i a[8]) {
  __m256i b[8];
  for (int i = 0; i < 8; i += 2) {
    b[i] = _mm256_unpacklo_epi32(a[i], a[i + 1]);      // rows i, i+1: dwords 0 1 | 4 5
    b[i + 1] = _mm256_unpackhi_epi32(a[i], a[i + 1]);  // 2 3 | 6 7
  }
  __m256i c[8];
  for (int i = 0; i < 8; i += 4)
    for (int h = 0; h < 2; ++h) {
      c[i + 2 * h] = _mm256_unpacklo_epi64(b[i + h], b[i + 2 + h]);  // rows i..i+3: dword 2h | 2h+4
      c[i + 2 * h + 1] = _mm256_unpackhi_epi64(b[i + h], b[i + 2 + h]);  // 2h+1 | 2h+5
    }
  for (int j = 0; j < 4; ++j) {
    a[j] = _mm256_permute2x128_si256(c[j], c[4 + j], 0x20);
    a[j + 4] = _mm256_permute2x128_si256(c[j], c[4 + j], 0x31);
  }
}

}  // namespace
}  // namespace hearth::cpu
