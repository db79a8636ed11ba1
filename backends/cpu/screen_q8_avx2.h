// The 5-bit screen of a Q8 LM head (layout and bound in head_screen.h) on 256-bit vectors, for
// AVX2 with or without AVX-VNNI: each row's 80 bytes per chunk are two 32-byte loads of nibbles
// (half 0 low, half 1 high) and 16 bytes of high bits, broadcast to both 16-byte lanes and shifted
// per lane so that the bits a lane needs sit at bit 4 of its bytes; u = nibble | that bit, the
// unsigned operand of Dot against the same int8 activations as the AVX2 Q8 kernel. One linear
// stream of 4-row groups.
// Include only from *_avx2.cpp and *_avxvnni.cpp files (anonymous namespace, as
// matmul_quant_avx2.h).
#pragma once
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "backends/cpu/head_screen.h"
#include "backends/cpu/matmul_quant_avx2.h"
#include "backends/cpu/quant_dispatch.h"

namespace hearth::cpu::qk {
namespace {

template <class Dot>
ScreenToken screen_prepare(const ScreenQ8Args& a) {
  const int64_t k = a.k, nc = k / kChunk;
  ActTile at;
  float* rest = carve_act_tile(a.scratch, k, &at);
  const ScreenToken t = screen_token(at.q, at.d, rest, nc, 8);
  if (!a.reuse_x) {
    quantize_act_scalar(a.x, k, at.q, at.d, at.s);
    const __m256i ones = _mm256_set1_epi8(1);
    for (int64_t j = 0; j < nc; ++j) {
      __m256i sum = _mm256_setzero_si256(), sabs = _mm256_setzero_si256();
      for (int i = 0; i < 4; ++i) {
        const __m256i x = load256(at.q + j * kChunk + 32 * i);
        sum = Dot::dot(sum, ones, x);
        sabs = Dot::dot(sabs, _mm256_abs_epi8(x), ones);
      }
      _mm256_storeu_si256(
          reinterpret_cast<__m256i*>(t.init + 8 * j),
          _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sum, kScreenOffsetLog2)));
      _mm256_storeu_ps(t.mid + 8 * j,
                       _mm256_mul_ps(_mm256_cvtepi32_ps(sum), _mm256_set1_ps(kScreenMid)));
      _mm256_storeu_ps(t.abs + 8 * j, _mm256_cvtepi32_ps(sabs));
    }
  }
  return t;
}

// Chunk j's 4 block weight scales as f32 in both 128-bit halves (lane i: block i mod 4).
template <int G, DType ST>
inline __m256 screen_chunk_scales(const uint16_t* sw, int64_t j) {
  __m128i h;
  if constexpr (G == 32) {
    h = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sw + 4 * j));
  } else if constexpr (G == 64) {
    int32_t v;
    std::memcpy(&v, sw + 2 * j, 4);
    h = _mm_unpacklo_epi16(_mm_cvtsi32_si128(v), _mm_cvtsi32_si128(v));  // s0 s0 s1 s1
  } else {
    h = _mm_set1_epi16(int16_t(sw[j]));
  }
  const __m128 f = ST == DType::BF16 ? _mm_castsi128_ps(_mm_slli_epi32(_mm_cvtepu16_epi32(h), 16))
                                     : _mm_cvtph_ps(h);
  return _mm256_set_m128(f, f);
}

// One 4-row group (codes at w, scales at sw): est[r] the estimate and tsum[r] the sum the bound
// scales (head_screen.h).
template <class Dot, int G, DType ST>
void screen_group(const uint8_t* w, const uint16_t* sw, int64_t ng, const ScreenToken& t,
                  int64_t nc, float* est, float* tsum) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(16);
  // 16-byte lane q of half 0 finds its high bits at bit q, of half 1 at bit 4 + q (q = 2 s + lane).
  const __m256i left[2] = {_mm256_setr_epi32(4, 4, 4, 4, 3, 3, 3, 3),
                           _mm256_setr_epi32(2, 2, 2, 2, 1, 1, 1, 1)};
  const __m256i right[2] = {_mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1),
                            _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3)};
  const __m256 step = _mm256_set1_ps(float(kScreenStep));
  const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 acc[4], acct[4];
  for (int r = 0; r < 4; ++r) acc[r] = acct[r] = _mm256_setzero_ps();
  for (int64_t j = 0; j < nc; ++j) {
    const int8_t* x = t.q + j * kChunk;
    const __m256i init = load256(t.init + 8 * j);
    const __m256 mid = _mm256_loadu_ps(t.mid + 8 * j);
    const __m256 abs = _mm256_loadu_ps(t.abs + 8 * j);
    const __m256 dx = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(t.d + 4 * j));
    for (int r = 0; r < 4; ++r) {
      const uint8_t* c = w + (4 * j + r) * kScreenQ8ChunkBytes;
      _mm_prefetch(reinterpret_cast<const char*>(c + kPrefetchAhead), _MM_HINT_T1);
      _mm_prefetch(reinterpret_cast<const char*>(c + 64 + kPrefetchAhead), _MM_HINT_T1);
      const __m256i high =
          _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c + 64)));
      __m256i h = init;
      for (int s = 0; s < 2; ++s) {  // slots 32 s .. 32 s + 31 of both halves
        const __m256i v = load256(c + 32 * s);
        const __m256i lo = _mm256_or_si256(_mm256_and_si256(v, m4),
                                           _mm256_and_si256(_mm256_sllv_epi32(high, left[s]), b4));
        const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), m4),
                                           _mm256_and_si256(_mm256_srlv_epi32(high, right[s]), b4));
        h = Dot::dot(Dot::dot(h, lo, load256(x + 32 * s)), hi, load256(x + 64 + 32 * s));
      }
      // kScreenStep sum h x' + kScreenMid sum x', exact in f32 (under 2^20 in magnitude).
      const __m256 v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(h), step, mid);
      const __m256 f = _mm256_mul_ps(screen_chunk_scales<G, ST>(sw + r * ng, j), dx);
      acc[r] = _mm256_fmadd_ps(v, f, acc[r]);
      acct[r] = _mm256_fmadd_ps(_mm256_and_ps(f, sign), abs, acct[r]);
    }
  }
  for (int r = 0; r < 4; ++r) {
    est[r] = hsum8(acc[r]);
    tsum[r] = hsum8(acct[r]);
  }
}

template <class Dot, int G, DType ST>
void screen_q8_rows(const ScreenQ8Args& a) {
  const ScreenToken t = screen_prepare<Dot>(a);
  const int64_t k = a.k, nc = k / kChunk, ng = k / G, row_bytes = nc * kScreenQ8ChunkBytes;
  const auto* scales = static_cast<const uint16_t*>(a.scales);
  for (int64_t r = a.r0; r < a.r1; r += 4) {
    float est[4], tsum[4];
    screen_group<Dot, G, ST>(a.codes + r * row_bytes, scales + r * ng, ng, t, nc, est, tsum);
    for (int64_t i = 0; i < std::min<int64_t>(4, a.r1 - r); ++i) {
      a.est[r - a.r0 + i] = est[i];
      a.hw[r - a.r0 + i] = tsum[i];
    }
  }
  const float factor = kScreenMid + float(nc + 8) / 32768.f;
  for (int64_t i = 0; i < a.r1 - a.r0; ++i) a.hw[i] *= factor;
}

template <class Dot>
void screen_q8_avx2(const ScreenQ8Args& a) {
  with_group_scales(a.group, a.scale_dtype, [&](auto g, auto st) {
    screen_q8_rows<Dot, decltype(g)::value, decltype(st)::value>(a);
  });
}

}  // namespace
}  // namespace hearth::cpu::qk
