// AVX-512 matmul for BF16 weights kept coded (bf16_coded.h: per 16-row group the bases of its
// blocks of 64 columns, then units of 16 rows x 8 columns as 128 low bytes and 64 bytes of 4-bit
// codes), x and y f32. A unit becomes its four kPackBf16 lines in registers (two nibble masks, two
// byte shuffles through its block's table, four interleaves) and each line is multiplied as the
// packed kernel multiplies it.
#include <cstring>

#include "backends/cpu/bf16_coded.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/simd_avx512.h"

namespace hearth::cpu {

namespace {

// The table of block b of the group at `group` (coded_table_entry): lane j holds base j less
// each code's d, its sign above, zero for d = 7.
inline __m512i block_table(const uint8_t* group, int64_t b) {
  const __m512i lane = _mm512_set_epi32(0x03030303, 0x03030303, 0x03030303, 0x03030303, 0x02020202,
                                        0x02020202, 0x02020202, 0x02020202, 0x01010101, 0x01010101,
                                        0x01010101, 0x01010101, 0, 0, 0, 0);
  const __m512i d = _mm512_set4_epi32(0x07060504, 0x03020100, 0x07060504, 0x03020100);
  const __m512i keep = _mm512_set4_epi32(0x00FFFFFF, -1, 0x00FFFFFF, -1);
  const __m512i sign = _mm512_set4_epi32(int32_t(0x80808080u), int32_t(0x80808080u), 0, 0);
  int32_t bases;
  std::memcpy(&bases, group + 4 * b, 4);
  const __m512i base = _mm512_shuffle_epi8(_mm512_set1_epi32(bases), lane);
  return _mm512_or_si512(_mm512_and_si512(_mm512_sub_epi8(base, d), keep), sign);
}

// Half h of the unit at u (of a group whose block's table is tab): its kPackBf16 lines 2 h and 2 h
// + 1.
template <int h>
inline void decode_half(const uint8_t* u, __m512i tab, __m512i nib, __m512i line[2]) {
  const __m512i lo = _mm512_loadu_si512(u + 64 * h);
  __m512i codes = _mm512_loadu_si512(u + 128);
  if constexpr (h == 1) codes = _mm512_srli_epi16(codes, 4);
  const __m512i hi = _mm512_shuffle_epi8(tab, _mm512_and_si512(codes, nib));
  line[0] = _mm512_unpacklo_epi8(lo, hi);
  line[1] = _mm512_unpackhi_epi8(lo, hi);
}

// Half h of unit `at` (byte offset in a group) of G groups against NT tokens, columns c .. c + 3,
// into acc.
template <int G, int NT, int h>
inline void half_unit(const uint8_t* w, int64_t gb, int64_t at, int64_t c, const __m512i* tab,
                      const float* x, int64_t ldx, __m512 (*acc)[NT]) {
  const __m512i high = _mm512_set1_epi32(int32_t(0xFFFF0000u));
  const __m512i nib = _mm512_set1_epi8(0x0F);
  __m512i line[G][2];
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g) decode_half<h>(w + g * gb + at, tab[g], nib, line[g]);
#pragma GCC unroll 2
  for (int l = 0; l < 2; ++l) {
    __m512 we[G], wo[G];
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      we[g] = _mm512_castsi512_ps(_mm512_slli_epi32(line[g][l], 16));
      wo[g] = _mm512_castsi512_ps(_mm512_and_si512(line[g][l], high));
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const __m512 xe = _mm512_set1_ps(x[t * ldx + c + 2 * l]);
      const __m512 xo = _mm512_set1_ps(x[t * ldx + c + 2 * l + 1]);
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) {
        acc[g][t] = _mm512_fmadd_ps(we[g], xe, acc[g][t]);
        acc[g][t] = _mm512_fmadd_ps(wo[g], xo, acc[g][t]);
      }
    }
  }
}

// G groups (gb bytes apart, from w) against NT tokens: per row and token one FMA chain in column
// order, as the packed kernel sums (bf16_coded.cpp's contract). Half a unit of every group is
// rebuilt at a time, so that 16 accumulators, the lines and a token's two broadcasts fit the
// registers. Each group is a stream prefetched kAhead bytes ahead; past its end the prefetch runs
// on into the same stream of the next G groups.
template <int G, int NT>
inline void block_coded(const uint8_t* w, int64_t gb, int64_t k, const float* x, int64_t ldx,
                        float* y, int64_t ldy) {
  constexpr int64_t kAhead = 6144;
  __m512 acc[G][NT];
  __m512i tab[G];
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) acc[g][t] = _mm512_setzero_ps();
  const int64_t units = k / kCodedUnitCols, hb = coded_header_bytes(k);
  for (int64_t u = 0; u < units; ++u) {
    if (u % kCodedBlockUnits == 0)
#pragma GCC unroll 4
      for (int g = 0; g < G; ++g) tab[g] = block_table(w + g * gb, u / kCodedBlockUnits);
    const int64_t at = hb + u * kCodedUnitBytes, ahead = at + kAhead;
    const uint8_t* pf = ahead < gb ? w + ahead : w + (G - 1) * gb + ahead;
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      const char* p = reinterpret_cast<const char*>(pf + g * gb);
      _mm_prefetch(p, _MM_HINT_T0);
      _mm_prefetch(p + 64, _MM_HINT_T0);
      _mm_prefetch(p + 128, _MM_HINT_T0);
    }
    half_unit<G, NT, 0>(w, gb, at, u * kCodedUnitCols, tab, x, ldx, acc);
    half_unit<G, NT, 1>(w, gb, at, u * kCodedUnitCols + 4, tab, x, ldx, acc);
  }
#pragma GCC unroll 4
  for (int g = 0; g < G; ++g)
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) _mm512_storeu_ps(y + t * ldy + 16 * g, acc[g][t]);
}

// block_coded<G, nt> for nt in 1..NT.
template <int G, int NT>
inline void block_coded_any(int nt, const uint8_t* w, int64_t gb, int64_t k, const float* x,
                            int64_t ldx, float* y, int64_t ldy) {
  if constexpr (NT > 1)
    if (nt < NT) return block_coded_any<G, NT - 1>(nt, w, gb, k, x, ldx, y, ldy);
  block_coded<G, NT>(w, gb, k, x, ldx, y, ldy);
}

// Rows [r0, r1) (whole groups): one token on four groups at a time (four chains in flight),
// several on pairs of groups, eight tokens at a time (the later token groups read the pair from
// L1), as the packed kernel.
void matmul_bf16_coded_avx512(const MatmulArgs& a) {
  const auto* groups = static_cast<const uint8_t*>(a.w_il);
  const int64_t gb = coded_group_bytes(a.k);
  for (int64_t r = a.r0; r < a.r1;) {
    const uint8_t* w = groups + r / kCodedRows * gb;
    const int64_t left = (a.r1 - r) / kCodedRows;
    if (a.n_tokens == 1 && left >= 4) {
      block_coded<4, 1>(w, gb, a.k, a.x, a.ldx, a.y + (r - a.r0), a.ldy);
      r += 4 * kCodedRows;
      continue;
    }
    for (int t = 0; t < a.n_tokens; t += 8) {
      const int nt = a.n_tokens - t < 8 ? a.n_tokens - t : 8;
      const float* x = a.x + t * a.ldx;
      float* y = a.y + t * a.ldy + (r - a.r0);
      if (left >= 2)
        block_coded_any<2, 8>(nt, w, gb, a.k, x, a.ldx, y, a.ldy);
      else
        block_coded_any<1, 8>(nt, w, gb, a.k, x, a.ldx, y, a.ldy);
    }
    r += (left >= 2 ? 2 : 1) * kCodedRows;
  }
}

void decode_bf16_coded_avx512(const uint8_t* group, int64_t k, uint16_t* packed) {
  const __m512i nib = _mm512_set1_epi8(0x0F);
  const int64_t hb = coded_header_bytes(k);
  __m512i tab = _mm512_setzero_si512();
  for (int64_t u = 0; u < k / kCodedUnitCols; ++u) {
    if (u % kCodedBlockUnits == 0) tab = block_table(group, u / kCodedBlockUnits);
    const uint8_t* unit = group + hb + u * kCodedUnitBytes;
    __m512i line[4];
    decode_half<0>(unit, tab, nib, line);
    decode_half<1>(unit, tab, nib, line + 2);
    for (int l = 0; l < 4; ++l) _mm512_storeu_si512(packed + (4 * u + l) * 32, line[l]);
  }
}

}  // namespace

void fill_matmul_bf16_coded_avx512(KernelTable& k) {
  k.matmul_bf16_coded = matmul_bf16_coded_avx512;
  k.decode_bf16_coded = decode_bf16_coded_avx512;
}

}  // namespace hearth::cpu
