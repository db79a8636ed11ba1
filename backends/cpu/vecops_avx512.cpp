// AVX-512 element-wise kernels on contiguous f32 arrays (16-bit input for widen, bf16 output for
// to_bf16) and the machine probes of hearth bench.
#include <cmath>

#include "backends/cpu/kernels.h"
#include "backends/cpu/peak_chains.h"
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
    const __mmask16 m = n - i < 16 ? tail_mask16(n - i) : __mmask16(0xFFFF);
    _mm512_mask_storeu_ps(
        out + i, m, silu_mul16(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i)));
  }
}

// Squares summed in double (eight lanes per half vector), like the reference.
void rms_norm_avx512(const float* x, const float* w, int64_t n, float eps, float* out) {
  __m512d s0 = _mm512_setzero_pd(), s1 = s0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512d lo = _mm512_cvtps_pd(_mm256_loadu_ps(x + i));
    const __m512d hi = _mm512_cvtps_pd(_mm256_loadu_ps(x + i + 8));
    s0 = _mm512_fmadd_pd(lo, lo, s0);
    s1 = _mm512_fmadd_pd(hi, hi, s1);
  }
  alignas(64) double lanes[8];
  _mm512_store_pd(lanes, _mm512_add_pd(s0, s1));
  double ss = 0;
  for (double l : lanes) ss += l;
  for (; i < n; ++i) ss += double(x[i]) * x[i];
  const __m512 inv = _mm512_set1_ps(float(1.0 / std::sqrt(ss / double(n) + double(eps))));
  for (i = 0; i + 16 <= n; i += 16)
    _mm512_storeu_ps(
        out + i, _mm512_mul_ps(_mm512_mul_ps(_mm512_loadu_ps(x + i), inv), _mm512_loadu_ps(w + i)));
  const float inv1 = _mm512_cvtss_f32(inv);
  for (; i < n; ++i) out[i] = x[i] * inv1 * w[i];
}

// Weights come straight from memory here, so prefetch ahead as the matmul kernels do.
template <DType T>
void widen_avx512(const void* src, float* dst, int64_t n) {
  const uint16_t* s = static_cast<const uint16_t*>(src);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    _mm_prefetch(reinterpret_cast<const char*>(s + i) + 16384, _MM_HINT_T0);
    for (int64_t j = i; j < i + 32; j += 16) {
      const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + j));
      if constexpr (T == DType::F16)
        _mm512_storeu_ps(dst + j, _mm512_cvtph_ps(h));
      else
        _mm512_storeu_ps(dst + j,
                         _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
    }
  }
  for (; i + 16 <= n; i += 16) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    if constexpr (T == DType::F16)
      _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
    else
      _mm512_storeu_ps(dst + i,
                       _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
  }
  if (i < n) {
    const __mmask16 m = n - i < 16 ? tail_mask16(n - i) : __mmask16(0xFFFF);
    const __m256i h = _mm256_maskz_loadu_epi16(m, s + i);
    if constexpr (T == DType::F16)
      _mm512_mask_storeu_ps(dst + i, m, _mm512_cvtph_ps(h));
    else
      _mm512_mask_storeu_ps(dst + i, m,
                            _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
  }
}

// vcvtneps2bf16 rounds to nearest even like f32_to_bf16.
void to_bf16_avx512(const float* x, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
  if (i < n) {
    const __mmask16 m = n - i < 16 ? tail_mask16(n - i) : __mmask16(0xFFFF);
    _mm256_mask_storeu_epi16(out + i, m,
                             (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

void to_f16_avx512(const float* x, uint16_t* out, int64_t n) {
  constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i < 16 ? tail_mask16(n - i) : __mmask16(0xFFFF);
    _mm256_mask_storeu_epi16(out + i, m, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), kRound));
  }
}

// quantize_kv_row's operations in its order, so its codes bit for bit: x / factor (exact
// divisions), the maximum magnitude ignoring NaN (vmaxps returns its second operand when either is
// NaN, as std::max does its first), clamp passing NaN through, rounding to nearest even, and the
// low byte of each integer (NaN becomes 0x80000000, whose low byte is the scalar's too).
void quantize_kv_row_avx512(const float* x, const float* factor, int64_t n, int8_t* codes,
                            float* scale) {
  auto y = [&](int64_t d, __mmask16 m) {
    const __m512 v = _mm512_maskz_loadu_ps(m, x + d);
    if (!factor) return v;
    return _mm512_div_ps(v, _mm512_mask_loadu_ps(_mm512_set1_ps(1.f), m, factor + d));
  };
  auto mask = [n](int64_t d) { return n - d < 16 ? tail_mask16(n - d) : __mmask16(0xFFFF); };
  __m512 amax = _mm512_setzero_ps();
  for (int64_t d = 0; d < n; d += 16) amax = _mm512_max_ps(_mm512_abs_ps(y(d, mask(d))), amax);
  const float a = _mm512_reduce_max_ps(amax);
  *scale = a / 127.f;
  const __m512 inv = _mm512_set1_ps(a > 0.f ? 127.f / a : 0.f);
  const __m512 lo = _mm512_set1_ps(-127.f), hi = _mm512_set1_ps(127.f);
  for (int64_t d = 0; d < n; d += 16) {
    const __mmask16 m = mask(d);
    const __m512 c = _mm512_min_ps(hi, _mm512_max_ps(lo, _mm512_mul_ps(y(d, m), inv)));
    _mm_mask_storeu_epi8(codes + d, m, _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(c)));
  }
}

// Four independent sums so the loads, not the adds, set the pace.
float read_sum_avx512(const float* x, int64_t n) {
  __m512 a = _mm512_setzero_ps(), b = a, c = a, d = a;
  for (int64_t i = 0; i < n; i += 64) {
    a = _mm512_add_ps(a, _mm512_load_ps(x + i));
    b = _mm512_add_ps(b, _mm512_load_ps(x + i + 16));
    c = _mm512_add_ps(c, _mm512_load_ps(x + i + 32));
    d = _mm512_add_ps(d, _mm512_load_ps(x + i + 48));
  }
  return hsum16(_mm512_add_ps(_mm512_add_ps(a, b), _mm512_add_ps(c, d)));
}

// Sixteen chains hide the latency on two ports.
float fma_loop_avx512(int64_t iters, double* flops) {
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  const __m512 s = run_chains<16>(
      iters, [](int j) { return _mm512_set1_ps(float(j)); },
      [&](__m512 a) { return _mm512_fmadd_ps(a, m, c); },
      [](__m512 a, __m512 b) { return _mm512_add_ps(a, b); });
  *flops = double(iters) * 16 * 16 * 2;
  return hsum16(s);
}

// The int8 GEMM's instruction: vpdpbusd, 64 multiply-adds each.
float dot_i8_loop_avx512(int64_t iters, double* ops) {
  const __m512i u = _mm512_set1_epi8(3), v = _mm512_set1_epi8(-2);
  const __m512i s = run_chains<16>(
      iters, [](int j) { return _mm512_set1_epi32(j); },
      [&](__m512i a) { return _mm512_dpbusd_epi32(a, u, v); },
      [](__m512i a, __m512i b) { return _mm512_add_epi32(a, b); });
  *ops = double(iters) * 16 * 64 * 2;
  // The chains wrap (vpdpbusd does); summed as unsigned, so the reduction wraps too, not UB
  // (_mm512_reduce_add_epi32 adds in int).
  uint32_t lanes[16], sum = 0;
  _mm512_storeu_si512(lanes, s);
  for (uint32_t l : lanes) sum += l;
  return float(int32_t(sum));
}

// The bf16 GEMM's: vdpbf16ps, 32 multiply-adds each; every step adds 0.5 x 0.5 twice per lane.
float dot_bf16_loop_avx512(int64_t iters, double* flops) {
  const __m512 half = _mm512_set1_ps(0.5f);
  const __m512bh h = _mm512_cvtne2ps_pbh(half, half);
  const __m512 s = run_chains<16>(
      iters, [](int j) { return _mm512_set1_ps(float(j)); },
      [&](__m512 a) { return _mm512_dpbf16_ps(a, h, h); },
      [](__m512 a, __m512 b) { return _mm512_add_ps(a, b); });
  *flops = double(iters) * 16 * 32 * 2;
  return hsum16(s);
}

}  // namespace

// Candidates 16 rows (4 groups, one per 128-bit lane) at a time: most groups fail, so most
// vectors store nothing.
int64_t screen_select_avx512(const float* est, const float* hw, int64_t n, int32_t row0,
                             float* lower, ScreenCandidate* out) {
  __m512 lo = _mm512_set1_ps(*lower);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i < 16 ? tail_mask16(n - i) : __mmask16(0xFFFF);
    const __m512 l =
        _mm512_sub_ps(_mm512_maskz_loadu_ps(m, est + i), _mm512_maskz_loadu_ps(m, hw + i));
    lo = _mm512_mask_max_ps(lo, m, l, lo);  // a NaN in l yields lo, the second operand
  }
  const float L = hmax16(lo);
  *lower = L;
  const __m512 t = _mm512_set1_ps(L), ninf = _mm512_set1_ps(-INFINITY);
  const __m512i first = _mm512_setr_epi32(0, 0, 0, 0, 4, 0, 0, 0, 8, 0, 0, 0, 12, 0, 0, 0);
  int64_t count = 0;
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i < 16 ? tail_mask16(n - i) : __mmask16(0xFFFF);
    __m512 up = _mm512_add_ps(_mm512_maskz_loadu_ps(m, est + i), _mm512_maskz_loadu_ps(m, hw + i));
    // Rows past n and NaNs count as -inf, so that neither can pass nor hide a group's maximum.
    up = _mm512_mask_mov_ps(ninf, m & _mm512_cmp_ps_mask(up, up, _CMP_ORD_Q), up);
    up = _mm512_max_ps(up, _mm512_permute_ps(up, 0xB1));
    up = _mm512_max_ps(up, _mm512_permute_ps(up, 0x4E));
    const __mmask16 pass = _mm512_mask_cmp_ps_mask(m & 0x1111, up, t, _CMP_GE_OQ);
    if (!pass) continue;
    alignas(64) int32_t rows[16];
    alignas(64) float ups[16];
    _mm512_mask_compressstoreu_epi32(rows, pass,
                                     _mm512_add_epi32(first, _mm512_set1_epi32(row0 + int32_t(i))));
    _mm512_mask_compressstoreu_ps(ups, pass, up);
    const int c = __builtin_popcount(pass);
    for (int j = 0; j < c; ++j) out[count + j] = {rows[j], ups[j]};
    count += c;
  }
  return count;
}

void fill_vecops_avx512(KernelTable& k) {
  k.screen_select = screen_select_avx512;
  k.silu_mul = silu_mul_avx512;
  k.rms_norm = rms_norm_avx512;
  k.widen[type_slot(DType::F16)] = widen_avx512<DType::F16>;
  k.widen[type_slot(DType::BF16)] = widen_avx512<DType::BF16>;
  k.to_bf16 = to_bf16_avx512;
  k.to_f16 = to_f16_avx512;
  k.quantize_kv_row = quantize_kv_row_avx512;
  k.read_sum = read_sum_avx512;
  k.fma_loop = fma_loop_avx512;
  k.dot_i8_loop = dot_i8_loop_avx512;
  k.dot_bf16_loop = dot_bf16_loop_avx512;
}

}  // namespace hearth::cpu
