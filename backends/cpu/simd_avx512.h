// AVX-512 helpers shared by the AVX-512 kernel files (16 f32 lanes). Anonymous namespace: each
// including file gets its own copy compiled with its own flags.
#pragma once
#include <immintrin.h>

// GCC 12 reports its own intrinsics' deliberately undefined pass-through operands as uninitialized
// wherever they are inlined (GCC bug 105593, fixed in GCC 13); the including kernel files opt out.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ < 13
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace hearth::cpu {
namespace {

// e^x with Cephes' expf polynomial on x - n ln2 and an exact 2^n scale (scalef); relative error
// about 2e-7, 0 below -104, overflow clamped at 88.7.
inline __m512 exp512(__m512 x) {
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.f)), _mm512_set1_ps(88.7f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.f)));
  return _mm512_scalef_ps(p, n);
}

inline __mmask16 tail_mask16(int64_t n) {
  return __mmask16((1u << n) - 1u);
}

// Horizontal sum and max.
inline float hsum16(__m512 v) {
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));
  v = _mm512_add_ps(v, _mm512_shuffle_f32x4(v, v, 0xB1));
  v = _mm512_add_ps(v, _mm512_permute_ps(v, 0x4E));
  v = _mm512_add_ps(v, _mm512_permute_ps(v, 0xB1));
  return _mm512_cvtss_f32(v);
}

inline float hmax16(__m512 v) {
  v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, 0x4E));
  v = _mm512_max_ps(v, _mm512_shuffle_f32x4(v, v, 0xB1));
  v = _mm512_max_ps(v, _mm512_permute_ps(v, 0x4E));
  v = _mm512_max_ps(v, _mm512_permute_ps(v, 0xB1));
  return _mm512_cvtss_f32(v);
}

// Sixteen vectors in, one out: lane j is the sum of v[j]'s lanes (a transpose folded into adds).
// add sums two vectors lane by lane: f32 (reduce16), or int32 on the same bits (reduce16i).
template <class Add>
inline __m512 reduce16_with(const __m512* v, Add add) {
  __m512 s[8], w[4], y[2];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i)
    s[i] =
        add(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(s[2 * i]), b = _mm512_castps_pd(s[2 * i + 1]);
    w[i] =
        add(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)), _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i)
    y[i] = add(_mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0x88),
               _mm512_shuffle_f32x4(w[2 * i], w[2 * i + 1], 0xDD));
  return add(_mm512_shuffle_f32x4(y[0], y[1], 0x88), _mm512_shuffle_f32x4(y[0], y[1], 0xDD));
}
inline __m512 reduce16(const __m512* v) {
  return reduce16_with(v, [](__m512 a, __m512 b) { return _mm512_add_ps(a, b); });
}
inline __m512i reduce16i(const __m512i* v) {
  __m512 f[16];
  for (int i = 0; i < 16; ++i) f[i] = _mm512_castsi512_ps(v[i]);
  return _mm512_castps_si512(reduce16_with(f, [](__m512 a, __m512 b) {
    return _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(a), _mm512_castps_si512(b)));
  }));
}

// a[i][j] -> a[j][i] for 16 vectors of 16 dwords: 4x4 transposes within 128-bit lanes, then two
// rounds of 128-bit lane shuffles.
inline void transpose16x16(__m512i a[16]) {
  __m512i b[16];
  for (int i = 0; i < 16; i += 2) {
    b[i] = _mm512_unpacklo_epi32(a[i], a[i + 1]);      // rows i, i+1: dwords 4l, 4l+1 of lane l
    b[i + 1] = _mm512_unpackhi_epi32(a[i], a[i + 1]);  // 4l+2, 4l+3
  }
  // c[4g + q]: lane l holds dword 4l + q of rows 4g .. 4g + 3.
  __m512i c[16];
  for (int i = 0; i < 16; i += 4)
    for (int h = 0; h < 2; ++h) {
      c[i + 2 * h] = _mm512_unpacklo_epi64(b[i + h], b[i + 2 + h]);
      c[i + 2 * h + 1] = _mm512_unpackhi_epi64(b[i + h], b[i + 2 + h]);
    }
  constexpr int kEven = _MM_SHUFFLE(2, 0, 2, 0), kOdd = _MM_SHUFFLE(3, 1, 3, 1);
  for (int q = 0; q < 4; ++q) {
    const __m512i e0 = _mm512_shuffle_i32x4(c[q], c[4 + q], kEven);  // lanes 0, 2 of groups 0, 1
    const __m512i e1 = _mm512_shuffle_i32x4(c[q], c[4 + q], kOdd);   // lanes 1, 3
    const __m512i f0 = _mm512_shuffle_i32x4(c[8 + q], c[12 + q], kEven);
    const __m512i f1 = _mm512_shuffle_i32x4(c[8 + q], c[12 + q], kOdd);
    a[q] = _mm512_shuffle_i32x4(e0, f0, kEven);
    a[8 + q] = _mm512_shuffle_i32x4(e0, f0, kOdd);
    a[4 + q] = _mm512_shuffle_i32x4(e1, f1, kEven);
    a[12 + q] = _mm512_shuffle_i32x4(e1, f1, kOdd);
  }
}

}  // namespace
}  // namespace hearth::cpu
