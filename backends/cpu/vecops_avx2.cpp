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

void to_f16_avx2(const float* x, uint16_t* out, int64_t n) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(x + i), kRound));
  if (i < n) {
    alignas(32) float t[8] = {};
    alignas(16) uint16_t h[8];
    for (int64_t j = i; j < n; ++j) t[j - i] = x[j];
    _mm_store_si128(reinterpret_cast<__m128i*>(h), _mm256_cvtps_ph(_mm256_load_ps(t), kRound));
    for (int64_t j = i; j < n; ++j) out[j] = h[j - i];
  }
}

// quantize_kv_row bit for bit, as quantize_kv_row_avx512 (whose comment says how); a short tail
// goes through a block padded with zeros over unit factors.
void quantize_kv_row_avx2(const float* x, const float* factor, int64_t n, int8_t* codes,
                          float* scale) {
  alignas(32) float tx[8] = {}, tf[8] = {1, 1, 1, 1, 1, 1, 1, 1};
  const int64_t whole = n / 8 * 8;
  for (int64_t j = whole; j < n; ++j) tx[j - whole] = x[j], tf[j - whole] = factor ? factor[j] : 1;
  auto y = [&](int64_t d) {
    const bool tail = d == whole;
    const __m256 v = _mm256_loadu_ps(tail ? tx : x + d);
    if (!factor) return v;
    return _mm256_div_ps(v, _mm256_loadu_ps(tail ? tf : factor + d));
  };
  const int64_t end = whole < n ? whole + 8 : whole;
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 amax = _mm256_setzero_ps();
  for (int64_t d = 0; d < end; d += 8) amax = _mm256_max_ps(_mm256_andnot_ps(sign, y(d)), amax);
  const float a = hmax256(amax);  // amax holds no NaN
  *scale = a / 127.f;
  const __m256 inv = _mm256_set1_ps(a > 0.f ? 127.f / a : 0.f);
  const __m256 lo = _mm256_set1_ps(-127.f), hi = _mm256_set1_ps(127.f);
  const __m256i low_bytes =
      _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1,
                       -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
  for (int64_t d = 0; d < end; d += 8) {
    const __m256 c = _mm256_min_ps(hi, _mm256_max_ps(lo, _mm256_mul_ps(y(d), inv)));
    const __m256i b = _mm256_shuffle_epi8(_mm256_cvtps_epi32(c), low_bytes);
    const __m128i q = _mm256_castsi256_si128(
        _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 0, 0, 0, 0, 0, 0)));
    if (d + 8 <= n) {
      _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + d), q);
    } else {
      alignas(16) int8_t t[16];
      _mm_store_si128(reinterpret_cast<__m128i*>(t), q);
      for (int64_t j = d; j < n; ++j) codes[j] = t[j - d];
    }
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
  k.to_f16 = to_f16_avx2;
  k.quantize_kv_row = quantize_kv_row_avx2;
  k.read_sum = read_sum_avx2;
  k.fma_loop = fma_loop_avx2;
}

}  // namespace hearth::cpu
