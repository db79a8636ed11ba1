// AVX2 matmul for BF16 weights kept coded (bf16_coded.h: per 16-row group the bases of its blocks
// of 64 columns, then units of 16 rows x 8 columns as 128 low bytes and 64 bytes of 4-bit codes),
// x and y f32. The AVX-512 kernel's rebuild by halves: a 32-byte half of the low bytes and of the
// codes holds rows 8 s .. 8 s + 7 (two 128-bit lanes of the block's table), so one byte shuffle
// and two interleaves give the half lines the AVX2 packed kernel reads (matmul_avx2.h,
// block_bf16_packed_avx2).
#include <immintrin.h>

#include <cstring>

#include "backends/cpu/bf16_coded.h"
#include "backends/cpu/bf16_coded_rows.h"
#include "backends/cpu/kernels.h"

namespace hearth::cpu {

namespace {

// The table of block b of the group at `group` (coded_table_entry), rows 8 s .. 8 s + 7 in tab[s]:
// 128-bit lane j holds base j less each code's d, its sign above, zero for d = 7.
inline void block_table(const uint8_t* group, int64_t b, __m256i tab[2]) {
  const __m256i d = _mm256_setr_epi32(0x03020100, 0x07060504, 0x03020100, 0x07060504, 0x03020100,
                                      0x07060504, 0x03020100, 0x07060504);
  const __m256i keep =
      _mm256_setr_epi32(-1, 0x00FFFFFF, -1, 0x00FFFFFF, -1, 0x00FFFFFF, -1, 0x00FFFFFF);
  const __m256i sign = _mm256_setr_epi32(0, 0, int32_t(0x80808080u), int32_t(0x80808080u), 0, 0,
                                         int32_t(0x80808080u), int32_t(0x80808080u));
  int32_t bases;
  std::memcpy(&bases, group + 4 * b, 4);
  for (int s = 0; s < 2; ++s) {
    const int32_t j0 = 0x01010101 * (2 * s), j1 = 0x01010101 * (2 * s + 1);
    const __m256i lane = _mm256_setr_epi32(j0, j0, j0, j0, j1, j1, j1, j1);
    const __m256i base = _mm256_shuffle_epi8(_mm256_set1_epi32(bases), lane);
    tab[s] = _mm256_or_si256(_mm256_and_si256(_mm256_sub_epi8(base, d), keep), sign);
  }
}

// Rows 8 s .. 8 s + 7 of half h of the unit at u: the high bytes of lines 2 h and 2 h + 1, beside
// their low bytes (lo), for unpacklo (line 2 h) and unpackhi (line 2 h + 1).
template <int h>
inline void decode_half(const uint8_t* u, int s, __m256i tab, __m256i nib, __m256i* lo,
                        __m256i* hi) {
  *lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(u + 64 * h + 32 * s));
  __m256i codes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(u + 128 + 32 * s));
  if constexpr (h == 1) codes = _mm256_srli_epi16(codes, 4);
  *hi = _mm256_shuffle_epi8(tab, _mm256_and_si256(codes, nib));
}

// Half h of unit `at` (byte offset in the group at w, its block's table tab) against NT tokens,
// columns c .. c + 3, into the group's accumulators (rows 8 s .. 8 s + 7 in acc[s]): both row
// halves rebuilt first, so each token's broadcasts serve both.
template <int NT, int h>
inline void half_unit(const uint8_t* w, int64_t at, int64_t c, const __m256i* tab, __m256i nib,
                      __m256i high, const float* x, int64_t ldx, __m256 (*acc)[NT]) {
  __m256i lo[2], hi[2];
  for (int s = 0; s < 2; ++s) decode_half<h>(w + at, s, tab[s], nib, &lo[s], &hi[s]);
  for (int l = 0; l < 2; ++l)
    for (int t = 0; t < NT; ++t) {
      const __m256 xe = _mm256_set1_ps(x[t * ldx + c + 2 * l]);
      const __m256 xo = _mm256_set1_ps(x[t * ldx + c + 2 * l + 1]);
      for (int s = 0; s < 2; ++s) {
        const __m256i v =
            l ? _mm256_unpackhi_epi8(lo[s], hi[s]) : _mm256_unpacklo_epi8(lo[s], hi[s]);
        acc[s][t] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_slli_epi32(v, 16)), xe, acc[s][t]);
        acc[s][t] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_and_si256(v, high)), xo, acc[s][t]);
      }
    }
}

// G groups (gb bytes apart, from w) against NT tokens: per row and token one FMA chain in column
// order (bf16_coded.cpp's contract), half a unit of a group rebuilt at a time, so that the 16
// registers hold the accumulators and what one half needs. Each group is a stream
// prefetched kAhead bytes ahead; past its end the prefetch runs on into the next G groups.
template <int G, int NT>
inline void block_coded(const uint8_t* w, int64_t gb, int64_t k, const float* x, int64_t ldx,
                        float* y, int64_t ldy) {
  constexpr int64_t kAhead = 12288;
  const __m256i high = _mm256_set1_epi32(int32_t(0xFFFF0000u));
  const __m256i nib = _mm256_set1_epi8(0x0F);
  __m256 acc[G][2][NT];
  for (int g = 0; g < G; ++g)
    for (int s = 0; s < 2; ++s)
      for (int t = 0; t < NT; ++t) acc[g][s][t] = _mm256_setzero_ps();
  __m256i tab[G][2];
  const int64_t units = k / kCodedUnitCols, hb = coded_header_bytes(k);
  for (int64_t u = 0; u < units; ++u) {
    if (u % kCodedBlockUnits == 0)
      for (int g = 0; g < G; ++g) block_table(w + g * gb, u / kCodedBlockUnits, tab[g]);
    const int64_t at = hb + u * kCodedUnitBytes, ahead = at + kAhead;
    const uint8_t* pf = ahead < gb ? w + ahead : w + (G - 1) * gb + ahead;
    for (int g = 0; g < G; ++g) {
      const char* p = reinterpret_cast<const char*>(pf + g * gb);
      _mm_prefetch(p, _MM_HINT_T0);
      _mm_prefetch(p + 64, _MM_HINT_T0);
      _mm_prefetch(p + 128, _MM_HINT_T0);
    }
    const int64_t c = u * kCodedUnitCols;
    for (int g = 0; g < G; ++g) {
      half_unit<NT, 0>(w + g * gb, at, c, tab[g], nib, high, x, ldx, acc[g]);
      half_unit<NT, 1>(w + g * gb, at, c + 4, tab[g], nib, high, x, ldx, acc[g]);
    }
  }
  for (int g = 0; g < G; ++g)
    for (int s = 0; s < 2; ++s)
      for (int t = 0; t < NT; ++t) _mm256_storeu_ps(y + t * ldy + 16 * g + 8 * s, acc[g][s][t]);
}

// The kernel as bf16_coded_rows.h calls it.
struct CodedAvx2 {
  template <int G, int NT>
  static void block(const uint8_t* w, int64_t gb, int64_t k, const float* x, int64_t ldx, float* y,
                    int64_t ldy) {
    block_coded<G, NT>(w, gb, k, x, ldx, y, ldy);
  }
};

void matmul_bf16_coded_avx2(const MatmulArgs& a) {
  coded_rows_in_fours<CodedAvx2>(a);
}

void decode_bf16_coded_avx2(const uint8_t* group, int64_t k, uint16_t* packed) {
  const __m256i nib = _mm256_set1_epi8(0x0F);
  const int64_t hb = coded_header_bytes(k);
  __m256i tab[2];
  for (int64_t u = 0; u < k / kCodedUnitCols; ++u) {
    if (u % kCodedBlockUnits == 0) block_table(group, u / kCodedBlockUnits, tab);
    const uint8_t* unit = group + hb + u * kCodedUnitBytes;
    for (int s = 0; s < 2; ++s) {
      __m256i lo[2], hi[2];
      decode_half<0>(unit, s, tab[s], nib, &lo[0], &hi[0]);
      decode_half<1>(unit, s, tab[s], nib, &lo[1], &hi[1]);
      for (int l = 0; l < 4; ++l) {
        const __m256i v = l % 2 ? _mm256_unpackhi_epi8(lo[l / 2], hi[l / 2])
                                : _mm256_unpacklo_epi8(lo[l / 2], hi[l / 2]);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(packed + (4 * u + l) * 32 + 16 * s), v);
      }
    }
  }
}

}  // namespace

void fill_matmul_bf16_coded_avx2(KernelTable& k) {
  k.matmul_bf16_coded = matmul_bf16_coded_avx2;
  k.decode_bf16_coded = decode_bf16_coded_avx2;
}

}  // namespace hearth::cpu
