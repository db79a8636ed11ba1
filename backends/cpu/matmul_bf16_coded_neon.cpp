// NEON matmul for BF16 weights kept coded (bf16_coded.h: per 16-row group the bases of its blocks
// of 64 columns, then units of 16 rows x 8 columns as 128 low bytes and 64 bytes of 4-bit codes),
// x and y f32. Quarter j (16 bytes) of a unit's codes and of each half of its low bytes holds rows
// 4 j .. 4 j + 3, so one table lookup (TBL) of the codes gives their high bytes and two interleaves
// (ZIP) with the low bytes give two kPackBf16 lines: a row's two columns in one 32-bit lane, which
// a shift and a mask widen to f32 for FMLA by element. ARMv8.0 instructions only.
#include <arm_neon.h>

#include "backends/cpu/bf16_coded.h"
#include "backends/cpu/bf16_coded_rows.h"
#include "backends/cpu/kernels.h"

namespace hearth::cpu {

namespace {

// The table of block b of the group at `group` (coded_table_entry), rows 4 j .. 4 j + 3 in tab[j]:
// entry c is base j less c's d, c's sign above, zero for d = 7.
inline void block_table(const uint8_t* group, int64_t b, uint8x16_t tab[4]) {
  static constexpr uint8_t kD[16] = {0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7};
  static constexpr uint8_t kKeep[16] = {255, 255, 255, 255, 255, 255, 255, 0,
                                        255, 255, 255, 255, 255, 255, 255, 0};
  static constexpr uint8_t kSign[16] = {0,   0,   0,   0,   0,   0,   0,   0,
                                        128, 128, 128, 128, 128, 128, 128, 128};
  const uint8x16_t d = vld1q_u8(kD), keep = vld1q_u8(kKeep), sign = vld1q_u8(kSign);
  for (int j = 0; j < 4; ++j)
    tab[j] = vorrq_u8(vandq_u8(vsubq_u8(vdupq_n_u8(group[4 * b + j]), d), keep), sign);
}

// Lines 2 L and 2 L + 1 of rows 4 j .. 4 j + 3 of the unit at u (quarter j of its codes, and that
// quarter's table), as kPackBf16 holds them: 16-bit element 2 r + h is row 4 j + r, column h of
// the line.
template <int L>
inline void decode_lines(const uint8_t* u, int j, uint8x16_t codes, uint8x16_t tab,
                         uint16x8_t* first, uint16x8_t* second) {
  const uint8x16_t lo = vld1q_u8(u + 64 * L + 16 * j);
  const uint8x16_t nib = L ? vshrq_n_u8(codes, 4) : vandq_u8(codes, vdupq_n_u8(0x0F));
  const uint8x16_t hi = vqtbl1q_u8(tab, nib);
  *first = vreinterpretq_u16_u8(vzip1q_u8(lo, hi));
  *second = vreinterpretq_u16_u8(vzip2q_u8(lo, hi));
}

// Two lines of 4 rows (decode_lines) against NT tokens' columns c .. c + 3, in column order, into
// those rows' accumulators acc[t].
template <int NT>
inline void fma_lines(uint16x8_t first, uint16x8_t second, const float* x, int64_t ldx, int64_t c,
                      float32x4_t* acc) {
  const uint32x4_t high = vdupq_n_u32(0xFFFF0000u);
  const uint32x4_t a = vreinterpretq_u32_u16(first), b = vreinterpretq_u32_u16(second);
  const float32x4_t w0 = vreinterpretq_f32_u32(vshlq_n_u32(a, 16));
  const float32x4_t w1 = vreinterpretq_f32_u32(vandq_u32(a, high));
  const float32x4_t w2 = vreinterpretq_f32_u32(vshlq_n_u32(b, 16));
  const float32x4_t w3 = vreinterpretq_f32_u32(vandq_u32(b, high));
  for (int t = 0; t < NT; ++t) {
    const float32x4_t xv = vld1q_f32(x + t * ldx + c);
    acc[t] = vfmaq_laneq_f32(acc[t], w0, xv, 0);
    acc[t] = vfmaq_laneq_f32(acc[t], w1, xv, 1);
    acc[t] = vfmaq_laneq_f32(acc[t], w2, xv, 2);
    acc[t] = vfmaq_laneq_f32(acc[t], w3, xv, 3);
  }
}

// G groups (gb bytes apart, from w) against NT tokens: per row and token one FMA chain in column
// order (bf16_coded.cpp's contract), rows 4 j .. 4 j + 3 of group g in acc[g][j]: 4 G tables and
// 4 G NT accumulators, within the 32 registers for G = 2, NT = 1 and G = 1, NT = 4 (the rebuild
// takes two operations for each FMA, so 8 chains keep up). No software prefetch, as in the other
// NEON matmuls: G streams in address order, for the cores' own prefetchers.
template <int G, int NT>
inline void block_coded(const uint8_t* w, int64_t gb, int64_t k, const float* x, int64_t ldx,
                        float* y, int64_t ldy) {
  float32x4_t acc[G][4][NT];
  for (int g = 0; g < G; ++g)
    for (int j = 0; j < 4; ++j)
      for (int t = 0; t < NT; ++t) acc[g][j][t] = vdupq_n_f32(0.f);
  uint8x16_t tab[G][4];
  const int64_t units = k / kCodedUnitCols, hb = coded_header_bytes(k);
  for (int64_t u = 0; u < units; ++u) {
    if (u % kCodedBlockUnits == 0)
      for (int g = 0; g < G; ++g) block_table(w + g * gb, u / kCodedBlockUnits, tab[g]);
    const int64_t c = u * kCodedUnitCols;
    for (int g = 0; g < G; ++g) {
      const uint8_t* unit = w + g * gb + hb + u * kCodedUnitBytes;
      for (int j = 0; j < 4; ++j) {
        const uint8x16_t codes = vld1q_u8(unit + 128 + 16 * j);
        uint16x8_t first, second;
        decode_lines<0>(unit, j, codes, tab[g][j], &first, &second);
        fma_lines<NT>(first, second, x, ldx, c, acc[g][j]);
        decode_lines<1>(unit, j, codes, tab[g][j], &first, &second);
        fma_lines<NT>(first, second, x, ldx, c + 4, acc[g][j]);
      }
    }
  }
  for (int g = 0; g < G; ++g)
    for (int j = 0; j < 4; ++j)
      for (int t = 0; t < NT; ++t) vst1q_f32(y + t * ldy + 16 * g + 4 * j, acc[g][j][t]);
}

// The kernel as bf16_coded_rows.h calls it.
struct CodedNeon {
  template <int G, int NT>
  static void block(const uint8_t* w, int64_t gb, int64_t k, const float* x, int64_t ldx, float* y,
                    int64_t ldy) {
    block_coded<G, NT>(w, gb, k, x, ldx, y, ldy);
  }
};

void matmul_bf16_coded_neon(const MatmulArgs& a) {
  coded_rows_in_fours<CodedNeon>(a);
}

void decode_bf16_coded_neon(const uint8_t* group, int64_t k, uint16_t* packed) {
  const int64_t hb = coded_header_bytes(k);
  uint8x16_t tab[4];
  for (int64_t u = 0; u < k / kCodedUnitCols; ++u) {
    if (u % kCodedBlockUnits == 0) block_table(group, u / kCodedBlockUnits, tab);
    const uint8_t* unit = group + hb + u * kCodedUnitBytes;
    uint16_t* lines = packed + 4 * u * 32;  // a line: 16 rows x 2 columns
    for (int j = 0; j < 4; ++j) {
      const uint8x16_t codes = vld1q_u8(unit + 128 + 16 * j);
      uint16x8_t first, second;
      decode_lines<0>(unit, j, codes, tab[j], &first, &second);
      vst1q_u16(lines + 8 * j, first);
      vst1q_u16(lines + 32 + 8 * j, second);
      decode_lines<1>(unit, j, codes, tab[j], &first, &second);
      vst1q_u16(lines + 64 + 8 * j, first);
      vst1q_u16(lines + 96 + 8 * j, second);
    }
  }
}

}  // namespace

void fill_matmul_bf16_coded_neon(KernelTable& k) {
  k.matmul_bf16_coded = matmul_bf16_coded_neon;
  k.decode_bf16_coded = decode_bf16_coded_neon;
}

}  // namespace hearth::cpu
