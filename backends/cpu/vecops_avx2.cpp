// AVX2 element-wise kernels on contiguous f32 arrays and the machine probes of hearth bench.
#include "backends/cpu/kernels.h"
#include "backends/cpu/peak_chains.h"
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

float read_sum_avx2(const float* x, int64_t n) {
  __m256 a = _mm256_setzero_ps(), b = a, c = a, d = a;
  for (int64_t i = 0; i < n; i += 32) {
    a = _mm256_add_ps(a, _mm256_load_ps(x + i));
    b = _mm256_add_ps(b, _mm256_load_ps(x + i + 8));
    c = _mm256_add_ps(c, _mm256_load_ps(x + i + 16));
    d = _mm256_add_ps(d, _mm256_load_ps(x + i + 24));
  }
  return hsum256(_mm256_add_ps(_mm256_add_ps(a, b), _mm256_add_ps(c, d)));
}

// Ten chains hide the FMA latency on two ports.
float fma_loop_avx2(int64_t iters, double* flops) {
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  const __m256 s = run_chains<10>(
      iters, [](int j) { return _mm256_set1_ps(float(j)); },
      [&](__m256 a) { return _mm256_fmadd_ps(a, m, c); },
      [](__m256 a, __m256 b) { return _mm256_add_ps(a, b); });
  *flops = double(iters) * 10 * 8 * 2;
  return hsum256(s);
}

}  // namespace

void fill_vecops_avx2(KernelTable& k) {
  k.silu_mul = silu_mul_avx2;
  k.read_sum = read_sum_avx2;
  k.fma_loop = fma_loop_avx2;
}

}  // namespace hearth::cpu
