#include "quant/quantize.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace hearth::quant {

namespace {

struct Fit {
  float err = INFINITY;
  uint16_t stored = 0;
};

// Codes for n weights against scale d and a codebook: the nearest level's index - 8 (ties go to
// the lower level). Levels are increasing, so the index is the count of midpoints below w / d.
inline void codebook_codes(const float* w, int64_t n, float d, const float* mid, int8_t* q) {
  if (d == 0.f) {
    for (int64_t i = 0; i < n; ++i) {
      int k = 0;
      for (int j = 0; j < 15; ++j) k += 0.f > mid[j];
      q[i] = int8_t(k - 8);
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const float v = w[i] / d;
    int k = 0;
    for (int j = 0; j < 15; ++j) k += v > mid[j];
    q[i] = int8_t(k - 8);
  }
}

// The values a group's codes stand for: the integers lo..hi, or the 16 levels of a codebook
// (indexed by code + 8).
struct Grid {
  int lo = 0, hi = 0;
  const float* lv = nullptr;  // the codebook's levels; null: the uniform grid
  float mid[15] = {};         // midpoints between successive levels

  explicit Grid(int bits) : lo(qmin(bits)), hi(qmax(bits)) {}
  explicit Grid(const float* levels) : lv(levels) {
    for (int i = 0; i < 15; ++i) mid[i] = 0.5f * (lv[i] + lv[i + 1]);
  }
  float level(int8_t q) const { return lv ? lv[q + 8] : float(q); }
  void codes(const float* w, int64_t n, float d, int8_t* q) const {
    if (lv)
      codebook_codes(w, n, d, mid, q);
    else
      round_codes(w, n, d, lo, hi, q);
  }
  // Squared error of the group as quantized, weighted by h (the calibration's importance) if given.
  float err(const float* w, const float* h, int64_t n, float d, const int8_t* q) const {
    float e = 0.f;
    for (int64_t i = 0; i < n; ++i) {
      const float r = w[i] - d * level(q[i]);
      e += (h ? h[i] : 1.f) * r * r;
    }
    return e;
  }
};

// One group's codes and stored scale. RTN stores `base`. Otherwise a clipping search: shrinking the
// scale from base (and from alt, unless 0) trades clipping error on the largest weights for finer
// steps on all the others; then, given the chosen codes, the error-minimising scale has a closed
// form: re-round and keep it if it helps (two rounds are enough to settle).
void fit_group(const float* w, const float* h, int64_t n, const Scheme& s, Method m,
               const Grid& grid, float amax, float base, float alt, int steps, float span,
               int8_t* q, uint16_t* scale) {
  auto stored_of = [&](float d) { return scale_from_f32(s.scale_dtype, d); };
  auto value_of = [&](uint16_t st) { return scale_to_f32(s.scale_dtype, st); };
  if (m == Method::Rtn || amax == 0.f) {
    *scale = stored_of(base);
    grid.codes(w, n, value_of(*scale), q);
    return;
  }
  int8_t tmp[128];
  Fit best;
  auto consider = [&](float d) {
    const uint16_t st = stored_of(d);
    const float dv = value_of(st);
    if (!std::isfinite(dv)) return;
    grid.codes(w, n, dv, tmp);
    const float e = grid.err(w, h, n, dv, tmp);
    if (e < best.err) {
      best.err = e;
      best.stored = st;
    }
  };
  for (int i = 0; i <= steps; ++i) {
    const float c = 1.f - span * float(i) / float(steps);
    consider(base * c);
    if (alt != 0.f) consider(alt * c);
  }
  for (int it = 0; it < 2; ++it) {
    grid.codes(w, n, value_of(best.stored), tmp);
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double hw = h ? h[i] : 1.0, l = grid.level(tmp[i]);
      num += hw * w[i] * l;
      den += hw * l * l;
    }
    if (den <= 0) break;
    consider(float(num / den));
  }
  *scale = best.stored;
  grid.codes(w, n, value_of(best.stored), q);
}

// The largest |w| and the signed weight that has it (the first, on ties).
void extremes(const float* w, int64_t n, float* amax, float* signed_max) {
  *amax = 0.f, *signed_max = 0.f;
  for (int64_t i = 0; i < n; ++i)
    if (std::fabs(w[i]) > *amax) {
      *amax = std::fabs(w[i]);
      *signed_max = w[i];
    }
}

// The codebook counterpart of quantize_group below: the same RTN rule (the largest-magnitude
// weight onto the extreme level of largest magnitude) and the same clipping search, with both
// extremes tried since the codebook need not be symmetric.
void quantize_group_codebook(const float* w, const float* h, int64_t n, const Scheme& s, Method m,
                             const int8_t* cb, int8_t* q, uint16_t* scale) {
  float lv[16];
  for (int i = 0; i < 16; ++i) lv[i] = float(cb[i]);
  float amax, signed_max;
  extremes(w, n, &amax, &signed_max);
  const float far = std::fabs(lv[0]) >= std::fabs(lv[15]) ? lv[0] : lv[15];
  const float near = far == lv[0] ? lv[15] : lv[0];
  fit_group(w, h, n, s, m, Grid(lv), amax, signed_max / far, near != 0.f ? signed_max / near : 0.f,
            20, 0.5f, q, scale);
}

void quantize_group(const float* w, const float* h, int64_t n, const Scheme& s, Method m, int8_t* q,
                    uint16_t* scale) {
  float amax, signed_max;
  extremes(w, n, &amax, &signed_max);
  // Q4 maps the largest-magnitude weight onto -8, using all 16 levels, and tries the symmetric
  // amax / 7 grid as well; Q8 stays symmetric.
  if (s.bits == 4)
    fit_group(w, h, n, s, m, Grid(4), amax, signed_max / -8.f, amax / 7.f, 20, 0.5f, q, scale);
  else
    fit_group(w, h, n, s, m, Grid(s.bits), amax, amax / 127.f, 0.f, 8, 0.12f, q, scale);
}

}  // namespace

void quantize_row(const float* w, int64_t n, const Scheme& s, Method m, const float* importance,
                  int8_t* q, uint16_t* scales, const int8_t* codebook) {
  if (m == Method::Rtn && !(codebook && s.bits == 4)) return quantize_row_rtn(w, n, s, q, scales);
  for (int64_t g = 0; g < n / s.group; ++g) {
    const float* h = importance ? importance + g * s.group : nullptr;
    if (codebook && s.bits == 4)
      quantize_group_codebook(w + g * s.group, h, s.group, s, m, codebook, q + g * s.group,
                              scales + g);
    else
      quantize_group(w + g * s.group, h, s.group, s, m, q + g * s.group, scales + g);
  }
}

void fit_codebook(const float* w, int64_t n, int group, int8_t* levels) {
  // The distribution of v = w / d in [-127, 127] as a histogram of d^2-weighted mass: with d fixed
  // by each group's extreme, the squared error d^2 (v - level)^2 depends on the codebook only
  // through it, so Lloyd-Max runs on the histogram alone.
  constexpr int kBinsPerUnit = 8;
  constexpr int kBins = 254 * kBinsPerUnit + 1;
  std::vector<double> mass(kBins, 0.0), moment(kBins, 0.0);
  for (int64_t g = 0; g + group <= n; g += group) {
    float signed_max = 0.f;
    for (int i = 0; i < group; ++i)
      if (std::fabs(w[g + i]) > std::fabs(signed_max)) signed_max = w[g + i];
    if (signed_max == 0.f) continue;
    const float d = signed_max / -127.f;
    for (int i = 0; i < group; ++i) {
      const double v = double(w[g + i] / d);
      if (!(std::fabs(v) <= 127.0)) continue;  // NaN: no place in the histogram
      const int b = int(std::lround((v + 127.0) * kBinsPerUnit));
      mass[size_t(b)] += double(d) * d;
      moment[size_t(b)] += double(d) * d * v;
    }
  }
  // Start from the uniform 4-bit grid stretched to -127 .. 111; level 0 stays at -127, where every
  // group's extreme lands.
  double lv[16];
  for (int i = 0; i < 16; ++i) lv[i] = (i - 8) * 127.0 / 8.0;
  for (int it = 0; it < 2000; ++it) {
    double num[16] = {}, den[16] = {};
    int k = 0;
    for (int b = 0; b < kBins; ++b) {
      const double v = double(b) / kBinsPerUnit - 127.0;
      while (k < 15 && v > 0.5 * (lv[k] + lv[k + 1])) ++k;
      num[k] += moment[size_t(b)];
      den[k] += mass[size_t(b)];
    }
    double moved = 0;
    for (int i = 1; i < 16; ++i) {
      if (den[i] <= 0) continue;  // an empty cell keeps its level
      const double nv = num[i] / den[i];
      moved = std::max(moved, std::fabs(nv - lv[i]));
      lv[i] = nv;
    }
    if (moved < 1e-4) break;
  }
  // Integer levels, strictly increasing, within [-127, 127].
  int out[16];
  out[0] = -127;
  for (int i = 1; i < 16; ++i)
    out[i] = std::max(out[i - 1] + 1, int(std::lround(std::clamp(lv[i], -127.0, 127.0))));
  for (int i = 15; i > 0 && out[i] > 127 - (15 - i); --i) out[i] = 127 - (15 - i);
  for (int i = 0; i < 16; ++i) levels[i] = int8_t(out[i]);
}

}  // namespace hearth::quant
