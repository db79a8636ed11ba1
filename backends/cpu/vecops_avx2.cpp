// AVX2 element-wise kernels on contiguous f32 arrays.
#include "backends/cpu/kernels.h"
#include "backends/cpu/simd_avx2.h"

namespace hearth::cpu {

namespace {

void silu_mul_avx2(const float* a, const float* b, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(a + i);
    const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), x));
    const __m256 s = _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.f), e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(s, _mm256_loadu_ps(b + i)));
  }
  if (i < n) {
    // The tail through a zero-padded block keeps one code path (and one exp) for every element.
    alignas(32) float ta[8] = {}, tb[8] = {}, to[8];
    for (int64_t j = i; j < n; ++j) ta[j - i] = a[j], tb[j - i] = b[j];
    silu_mul_avx2(ta, tb, to, 8);
    for (int64_t j = i; j < n; ++j) out[j] = to[j - i];
  }
}

}  // namespace

void fill_vecops_avx2(KernelTable& k) { k.silu_mul = silu_mul_avx2; }

}  // namespace hearth::cpu
