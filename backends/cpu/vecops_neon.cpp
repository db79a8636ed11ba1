// NEON element-wise kernels on contiguous f32 arrays: silu_mul, rms_norm, bf16 rounding, and the
// f16 and int8 rows of a KV cache. ARMv8.0 only.
#include <arm_neon.h>

#include <cmath>

#include "backends/cpu/kernels.h"
#include "backends/cpu/simd_neon.h"
#include "core/dtype.h"

namespace hearth::cpu {

namespace {

void silu_mul_neon(const float* a, const float* b, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t x = vld1q_f32(a + i);
    const float32x4_t s = vdivq_f32(x, vaddq_f32(vdupq_n_f32(1.f), exp4(vnegq_f32(x))));
    vst1q_f32(out + i, vmulq_f32(s, vld1q_f32(b + i)));
  }
  if (i < n) {
    // The tail through a zero-padded block keeps one code path (and one exp) for every element.
    float ta[4] = {}, tb[4] = {}, to[4];
    for (int64_t j = i; j < n; ++j) ta[j - i] = a[j], tb[j - i] = b[j];
    silu_mul_neon(ta, tb, to, 4);
    for (int64_t j = i; j < n; ++j) out[j] = to[j - i];
  }
}

// The sum of squares in double, as the reference's.
void rms_norm_neon(const float* x, const float* w, int64_t n, float eps, float* out) {
  float64x2_t s0 = vdupq_n_f64(0.0), s1 = s0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const float32x4_t v = vld1q_f32(x + i);
    const float64x2_t lo = vcvt_f64_f32(vget_low_f32(v)), hi = vcvt_high_f64_f32(v);
    s0 = vfmaq_f64(s0, lo, lo);
    s1 = vfmaq_f64(s1, hi, hi);
  }
  double ss = vaddvq_f64(vaddq_f64(s0, s1));
  for (; i < n; ++i) ss += double(x[i]) * x[i];
  const float inv = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
  for (i = 0; i + 4 <= n; i += 4)
    vst1q_f32(out + i, vmulq_f32(vmulq_n_f32(vld1q_f32(x + i), inv), vld1q_f32(w + i)));
  for (; i < n; ++i) out[i] = x[i] * inv * w[i];
}

// FCVTN rounds to nearest even (the default FPCR) and overflows to inf, as f32_to_f16.
void to_f16_neon(const float* x, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    vst1_u16(out + i, vreinterpret_u16_f16(vcvt_f16_f32(vld1q_f32(x + i))));
  for (; i < n; ++i) out[i] = f32_to_f16(x[i]);
}

// f32_to_bf16 on 4 lanes: round to nearest even, a NaN made quiet.
void to_bf16_neon(const float* x, uint16_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    const uint32x4_t u = vreinterpretq_u32_f32(vld1q_f32(x + i));
    const uint32x4_t lsb = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
    const uint32x4_t r = vaddq_u32(u, vaddq_u32(vdupq_n_u32(0x7fff), lsb));
    const uint32x4_t nan =
        vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffff)), vdupq_n_u32(0x7f800000));
    const uint32x4_t quiet = vorrq_u32(u, vdupq_n_u32(0x400000));
    vst1_u16(out + i, vshrn_n_u32(vbslq_u32(nan, quiet, r), 16));
  }
  for (; i < n; ++i) out[i] = f32_to_bf16(x[i]);
}

// quantize_kv_row bit for bit: x / factor (exact divisions), the maximum magnitude ignoring NaN
// (FMAXNM, as std::max keeps its first operand), clamp passing NaN through (FMAX and FMIN return
// NaN), rounding to nearest even, NaN to 0 (FCVTNS, as lrint's low byte here); a short tail goes
// through a block padded with zeros over unit factors.
void quantize_kv_row_neon(const float* x, const float* factor, int64_t n, int8_t* codes,
                          float* scale) {
  float tx[4] = {}, tf[4] = {1, 1, 1, 1};
  const int64_t whole = n / 4 * 4, end = whole < n ? whole + 4 : whole;
  for (int64_t j = whole; j < n; ++j) tx[j - whole] = x[j], tf[j - whole] = factor ? factor[j] : 1;
  auto y = [&](int64_t d) {
    const bool tail = d == whole;
    const float32x4_t v = vld1q_f32(tail ? tx : x + d);
    return factor ? vdivq_f32(v, vld1q_f32(tail ? tf : factor + d)) : v;
  };
  float32x4_t amax = vdupq_n_f32(0.f);
  for (int64_t d = 0; d < end; d += 4) amax = vmaxnmq_f32(amax, vabsq_f32(y(d)));
  const float a = vmaxnmvq_f32(amax);
  *scale = a / 127.f;
  const float inv = a > 0.f ? 127.f / a : 0.f;
  for (int64_t d = 0; d < end; d += 4) {
    const float32x4_t c =
        vminq_f32(vdupq_n_f32(127.f), vmaxq_f32(vdupq_n_f32(-127.f), vmulq_n_f32(y(d), inv)));
    const int32x4_t q = vcvtnq_s32_f32(c);
    int32_t lanes[4];
    vst1q_s32(lanes, q);
    for (int j = 0; j < 4 && d + j < n; ++j) codes[d + j] = int8_t(lanes[j]);
  }
}

}  // namespace

void fill_vecops_neon(KernelTable& k) {
  k.silu_mul = silu_mul_neon;
  k.rms_norm = rms_norm_neon;
  k.to_bf16 = to_bf16_neon;
  k.to_f16 = to_f16_neon;
  k.quantize_kv_row = quantize_kv_row_neon;
}

}  // namespace hearth::cpu
