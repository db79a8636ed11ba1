// One row of a BF16 LM head's screen (head_screen.h) in GCC vector types of B bytes, so that each
// ISA's file compiles the same code at its own width (head_screen.cpp the baseline's 16 bytes,
// screen_q8_avx2.cpp 32, screen_q8_avx512.cpp 64): the row's Q8 g32 codes in element order and
// F16 scales as the quantizer's round-to-nearest makes them (quant::quantize_row_rtn: d = amax /
// 127 rounded to F16, q = round(w / d) to even), and its bounds {M, E, N}: the largest 32-block
// norm of w and of w - d q, and |w|, rounded up.
// The sums of squares run in four double lanes in element order at every width, so only FMA
// contraction can tell the ISAs' bounds apart, within their 1e-9 margin. Include only from those
// files (anonymous namespace).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "backends/cpu/head_screen.h"
#include "core/dtype.h"

namespace hearth::cpu {
namespace {

// Rounds up to the next float, so that a bound computed in double stays a bound in float.
inline float up(double v) {
  const float f = float(v);
  return double(f) >= v ? f : std::nextafter(f, INFINITY);
}

// Vectors of B bytes: floats, their int32 conversions and those narrowed to int8 (GCC ignores a
// vector_size that depends on a template parameter, hence one specialization per width).
template <int B>
struct ScreenVec;
#define HEARTH_SCREEN_VEC(B)                              \
  template <>                                             \
  struct ScreenVec<B> {                                   \
    typedef float F __attribute__((vector_size(B)));      \
    typedef int32_t I __attribute__((vector_size(B)));    \
    typedef int8_t C __attribute__((vector_size(B / 4))); \
  };
HEARTH_SCREEN_VEC(16)
HEARTH_SCREEN_VEC(32)
HEARTH_SCREEN_VEC(64)
#undef HEARTH_SCREEN_VEC

template <int B>
void screen_row(const float* w, int64_t k, int8_t* q, uint16_t* scales, float* bounds) {
  constexpr int N = B / 4, G = int(kScreenGroup);  // floats a vector, weights a group
  using F = typename ScreenVec<B>::F;
  using I = typename ScreenVec<B>::I;
  using C = typename ScreenVec<B>::C;
  using F4 = float __attribute__((vector_size(16)));
  using D4 = double __attribute__((vector_size(32)));
  static_assert(G % N == 0, "whole vectors a group");
  auto load = [](const float* p) {
    F v;
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  // Pieces of up to 64 groups: their scales first, so that the F16 conversions (calls) stay out
  // of the vector loops.
  constexpr int64_t kPiece = 64;
  double m = 0, e = 0, n = 0;
  for (int64_t b0 = 0; b0 < k / G; b0 += kPiece) {
    const int64_t nb = std::min(kPiece, k / G - b0);
    float d[kPiece];
    for (int64_t b = 0; b < nb; ++b) {
      F mx = {};
      for (int j = 0; j < G / N; ++j) {
        const F a = F(I(load(w + (b0 + b) * G + j * N)) & 0x7fffffff);  // |w|
        mx = mx < a ? a : mx;  // a NaN keeps mx, as the quantizer skips NaN
      }
      float amax = 0.f;
      for (int l = 0; l < N; ++l) amax = std::max(amax, mx[l]);
      d[b] = amax;
    }
    for (int64_t b = 0; b < nb; ++b) {
      scales[b0 + b] = f32_to_f16(d[b] / 127.f);
      d[b] = f16_to_f32(scales[b0 + b]);
    }
    for (int64_t b = 0; b < nb; ++b) {
      const float* wg = w + (b0 + b) * G;
      float qf[G];  // the group's codes as floats (exact)
      for (int j = 0; j < G / N; ++j) {
        // Clamped first, then rounded to even by the 1.5 * 2^23 trick (as quant::round_codes);
        // a division, not a reciprocal, as the quantizer specifies.
        F v = d[b] == 0.f ? F{} : load(wg + j * N) / d[b];
        v = v < -127.f ? F{} - 127.f : v;
        v = v > 127.f ? F{} + 127.f : v;
        v = (v + 12582912.f) - 12582912.f;
        std::memcpy(qf + j * N, &v, sizeof v);
        const C c = __builtin_convertvector(__builtin_convertvector(v, I), C);
        std::memcpy(q + (b0 + b) * G + j * N, &c, sizeof c);
      }
      D4 wp = {}, ep = {};
      for (int j = 0; j < G; j += 4) {
        F4 w4, q4;
        std::memcpy(&w4, wg + j, sizeof w4);
        std::memcpy(&q4, qf + j, sizeof q4);
        const D4 wv = __builtin_convertvector(w4, D4);
        const D4 diff = wv - __builtin_convertvector(q4, D4) * double(d[b]);
        wp += wv * wv;
        ep += diff * diff;
      }
      const double wb = (wp[0] + wp[1]) + (wp[2] + wp[3]);
      const double eb = (ep[0] + ep[1]) + (ep[2] + ep[3]);
      m = std::max(m, wb);
      e = std::max(e, eb);
      n += wb;
    }
  }
  // A relative 1e-9 covers the rounding of the sums in double.
  bounds[0] = up(std::sqrt(m) * (1 + 1e-9));
  bounds[1] = up(std::sqrt(e) * (1 + 1e-9));
  bounds[2] = up(std::sqrt(n) * (1 + 1e-9));
}

}  // namespace
}  // namespace hearth::cpu
