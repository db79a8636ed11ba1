// AVX-512 element-wise kernels on contiguous f32 arrays (bf16 output for to_bf16).
#include "backends/cpu/kernels.h"
#include "backends/cpu/simd_avx512.h"

namespace hearth::cpu {

namespace {

inline __m512 silu_mul16(__m512 a, __m512 b) {
  const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), a));
  return _mm512_mul_ps(_mm512_div_ps(a, _mm512_add_ps(_mm512_set1_ps(1.f), e)), b);
}

void silu_mul_avx512(const float* a, const float* b, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, silu_mul16(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i)));
  if (i < n) {
    const __mmask16 m = tail_mask16(n - i);
    _mm512_mask_storeu_ps(out + i, m,
                          silu_mul16(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
  }
}

// vcvtneps2bf16 rounds to nearest even like f32_to_bf16.
void to_bf16_avx512(const float* x, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = tail_mask16(n - i);
    _mm256_mask_storeu_epi16(out + i, m, (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

}  // namespace

void fill_vecops_avx512(KernelTable& k) {
  k.silu_mul = silu_mul_avx512;
  k.to_bf16 = to_bf16_avx512;
}

}  // namespace hearth::cpu
