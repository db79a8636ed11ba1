#include "quant/quantize.h"

#include <cmath>

#include "quant/format.h"

namespace hearth::quant {

std::string scheme_str(const Scheme& s) {
  if (!s.quantized()) return "float";
  return "int" + std::to_string(s.bits) + " g" + std::to_string(s.group) + " " +
         dtype_name(s.scale_dtype);
}

double scheme_bits_per_weight(const Scheme& s, int float_bits) {
  if (!s.quantized()) return float_bits;
  return s.bits + 16.0 / s.group;
}

namespace {

struct Fit {
  float err = INFINITY;
  uint16_t stored = 0;
};

// Round to nearest even for |v| < 2^22, as nearbyint does in the default rounding mode, without
// the library call baseline x86-64 makes for nearbyintf (this loop runs ~50 times per weight).
inline float round_even(float v) {
  constexpr float kMagic = 12582912.f;  // 1.5 * 2^23
  return (v + kMagic) - kMagic;
}

// Codes for n weights against the stored scale d (already rounded to its storage type).
inline void round_codes(const float* w, int64_t n, float d, int lo, int hi, int8_t* q) {
  const float flo = float(lo), fhi = float(hi);
  if (d == 0.f) {
    for (int64_t i = 0; i < n; ++i) q[i] = 0;
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    float v = w[i] / d;  // a division, not a reciprocal: exactly round(w / scale) as specified
    v = v < flo ? flo : v > fhi ? fhi : v;  // clamp first: keeps round_even in range
    q[i] = int8_t(round_even(v));
  }
}

inline float weighted_err(const float* w, const float* h, int64_t n, float d, const int8_t* q) {
  float e = 0.f;
  for (int64_t i = 0; i < n; ++i) {
    const float r = w[i] - d * float(q[i]);
    e += (h ? h[i] : 1.f) * r * r;
  }
  return e;
}

void quantize_group(const float* w, const float* h, int64_t n, const Scheme& s, Method m, int8_t* q,
                    uint16_t* scale) {
  const int lo = qmin(s.bits), hi = qmax(s.bits);
  float amax = 0.f, signed_max = 0.f;
  for (int64_t i = 0; i < n; ++i)
    if (std::fabs(w[i]) > amax) {
      amax = std::fabs(w[i]);
      signed_max = w[i];
    }
  // Q4 maps the largest-magnitude weight onto -8, using all 16 levels; Q8 stays symmetric.
  const float base = s.bits == 4 ? signed_max / -8.f : amax / 127.f;
  auto stored_of = [&](float d) { return scale_from_f32(s.scale_dtype, d); };
  auto value_of = [&](uint16_t st) { return scale_to_f32(s.scale_dtype, st); };

  if (m == Method::Rtn || amax == 0.f) {
    *scale = stored_of(base);
    round_codes(w, n, value_of(*scale), lo, hi, q);
    return;
  }
  int8_t tmp[128];
  Fit best;
  auto consider = [&](float d) {
    const uint16_t st = stored_of(d);
    const float dv = value_of(st);
    if (!std::isfinite(dv)) return;
    round_codes(w, n, dv, lo, hi, tmp);
    const float e = weighted_err(w, h, n, dv, tmp);
    if (e < best.err) {
      best.err = e;
      best.stored = st;
    }
  };
  // Clipping grid: shrinking the scale trades clipping error on the largest weights for finer
  // steps on all the others. For 4 bits, the symmetric amax / 7 grid is tried as well.
  const int steps = s.bits == 4 ? 20 : 8;
  const float span = s.bits == 4 ? 0.5f : 0.12f;
  for (int i = 0; i <= steps; ++i) {
    const float c = 1.f - span * float(i) / float(steps);
    consider(base * c);
    if (s.bits == 4) consider(amax / 7.f * c);
  }
  // Given the chosen codes, the error-minimising scale has a closed form; re-round and keep it if
  // it helps (two rounds are enough to settle).
  for (int it = 0; it < 2; ++it) {
    const float d = value_of(best.stored);
    round_codes(w, n, d, lo, hi, tmp);
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double hw = h ? h[i] : 1.0;
      num += hw * w[i] * tmp[i];
      den += hw * double(tmp[i]) * tmp[i];
    }
    if (den <= 0) break;
    consider(float(num / den));
  }
  *scale = best.stored;
  round_codes(w, n, value_of(best.stored), lo, hi, q);
}

}  // namespace

void quantize_row(const float* w, int64_t n, const Scheme& s, Method m, const float* importance,
                  int8_t* q, uint16_t* scales) {
  for (int64_t g = 0; g < n / s.group; ++g)
    quantize_group(w + g * s.group, importance ? importance + g * s.group : nullptr, s.group, s, m,
                   q + g * s.group, scales + g);
}

}  // namespace hearth::quant
