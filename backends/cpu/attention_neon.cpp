// NEON attention: q/out rows f32 [n_tok][group][head_dim] (strided per token), one KV head's cache
// rows [position][head_dim] in F32/F16/BF16/I8; key tiles of 64 positions, online softmax per query
// row, f32 throughout (16-bit and I8 caches are widened tile by tile, I8 codes times their
// position's scale and, for keys, the channel factors). Every row, decode or prefill, takes the
// per-row path; a head size that is not whole vectors of 8 takes the reference. ARMv8.0 only: no
// fp16 arithmetic, no dot products.
#include <arm_neon.h>

#include <algorithm>
#include <cmath>

#include "backends/cpu/attention_scratch.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/ops.h"
#include "backends/cpu/simd_neon.h"

namespace hearth::cpu {

namespace {

constexpr int kTile = int(kAttnKeyTile);
constexpr int kRows = int(kAttnRowsPerBlock);
static_assert(kTile % 4 == 0, "key tiles are whole vectors");

// Widens rows [p0, p0 + n) of a 16-bit cache into a dense f32 tile.
template <DType T>
void widen_tile(const void* src, int p0, int n, int hd, float* dst, const void* pf) {
  const uint16_t* s = static_cast<const uint16_t*>(src) + int64_t(p0) * hd;
  for (int64_t i = 0; i < int64_t(n) * hd; i += 8) {
    if (pf && i % 32 == 0) prefetch_l2(static_cast<const uint16_t*>(pf) + int64_t(p0) * hd + i);
    const uint16x8_t h = vld1q_u16(s + i);
    float32x4_t lo, hi;
    if constexpr (T == DType::F16) {
      lo = vcvt_f32_f16(vreinterpret_f16_u16(vget_low_u16(h)));
      hi = vcvt_high_f32_f16(vreinterpretq_f16_u16(h));
    } else {
      lo = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h), 16));
      hi = vreinterpretq_f32_u32(vshll_high_n_u16(h, 16));
    }
    vst1q_f32(dst + i, lo);
    vst1q_f32(dst + i + 4, hi);
  }
}

// Dequantizes rows [p0, p0 + n) of an I8 cache: code * scale[p] * factor[d] (factor null: ones).
void widen_tile_i8(const void* src, const float* scale, const float* factor, int p0, int n, int hd,
                   float* dst, const void* pf) {
  const int8_t* s = static_cast<const int8_t*>(src) + int64_t(p0) * hd;
  for (int j = 0; j < n; ++j)
    for (int d = 0; d < hd; d += 8) {
      if (pf && d % 64 == 0)
        prefetch_l2(static_cast<const int8_t*>(pf) + (int64_t(p0) + j) * hd + d);
      const int16x8_t c = vmovl_s8(vld1_s8(s + int64_t(j) * hd + d));
      const float sc = scale[p0 + j];
      float32x4_t lo = vmulq_n_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(c))), sc);
      float32x4_t hi = vmulq_n_f32(vcvtq_f32_s32(vmovl_high_s16(c)), sc);
      if (factor) {
        lo = vmulq_f32(lo, vld1q_f32(factor + d));
        hi = vmulq_f32(hi, vld1q_f32(factor + d + 4));
      }
      float* o = dst + int64_t(j) * hd + d;
      vst1q_f32(o, lo);
      vst1q_f32(o + 4, hi);
    }
}

// Scaled scores of one query row against n keys (f32 rows of kt) into s, padded with -inf to whole
// vectors. Four keys at a time share each load of the query; keys past n are read from row n - 1,
// so no load leaves the tile. The same rows of pf (or null) are prefetched meanwhile.
inline void scores(const float* q, const float* kt, const void* pf, int n, int hd, float scale,
                   float* s) {
  for (int j0 = 0; j0 < n; j0 += 4) {
    const float* rows[4];
    float32x4_t acc[4][2];
    for (int j = 0; j < 4; ++j) {
      rows[j] = kt + int64_t(j0 + j < n ? j0 + j : n - 1) * hd;
      acc[j][0] = acc[j][1] = vdupq_n_f32(0.f);
    }
    for (int d = 0; d < hd; d += 8) {
      const float32x4_t q0 = vld1q_f32(q + d), q1 = vld1q_f32(q + d + 4);
      for (int j = 0; j < 4; ++j) {
        if (pf && d % 16 == 0) prefetch_l2(static_cast<const float*>(pf) + (rows[j] - kt) + d);
        acc[j][0] = vfmaq_f32(acc[j][0], q0, vld1q_f32(rows[j] + d));
        acc[j][1] = vfmaq_f32(acc[j][1], q1, vld1q_f32(rows[j] + d + 4));
      }
    }
    for (int j = 0; j < 4; ++j)
      s[j0 + j] = j0 + j < n ? vaddvq_f32(vaddq_f32(acc[j][0], acc[j][1])) * scale : -INFINITY;
  }
}

// o += sum_j e[j] v_j over n value rows; eight vectors of o stay in registers per pass. The same
// rows of pf (or null) are prefetched meanwhile.
inline void accumulate_v(const float* e, const float* vt, const void* pf, int n, int hd, float* o) {
  int d0 = 0;
  for (; d0 + 32 <= hd; d0 += 32) {
    float32x4_t ov[8];
    for (int c = 0; c < 8; ++c) ov[c] = vld1q_f32(o + d0 + 4 * c);
    for (int j = 0; j < n; ++j) {
      const float* vr = vt + int64_t(j) * hd + d0;
      if (pf) {
        const float* p = static_cast<const float*>(pf) + (vr - vt);
        prefetch_l2(p);
        prefetch_l2(p + 16);
      }
      for (int c = 0; c < 8; ++c) ov[c] = vfmaq_n_f32(ov[c], vld1q_f32(vr + 4 * c), e[j]);
    }
    for (int c = 0; c < 8; ++c) vst1q_f32(o + d0 + 4 * c, ov[c]);
  }
  for (; d0 < hd; d0 += 8) {
    float32x4_t a = vld1q_f32(o + d0), b = vld1q_f32(o + d0 + 4);
    for (int j = 0; j < n; ++j) {
      const float* vr = vt + int64_t(j) * hd + d0;
      a = vfmaq_n_f32(a, vld1q_f32(vr), e[j]);
      b = vfmaq_n_f32(b, vld1q_f32(vr + 4), e[j]);
    }
    vst1q_f32(o + d0, a);
    vst1q_f32(o + d0 + 4, b);
  }
}

// One row's online softmax over a tile's scores s[0..n) (padded with -inf to whole vectors):
// rescales its running sum l and output o to the new maximum m, and leaves exp(s - m) in s.
inline void softmax_tile(float* s, int n, int hd, float* m, float* l, float* o) {
  float32x4_t mx = vdupq_n_f32(-INFINITY);
  for (int j = 0; j < n; j += 4) mx = vmaxq_f32(mx, vld1q_f32(s + j));
  const float tile_max = vmaxvq_f32(mx);
  const float m_new = tile_max > *m ? tile_max : *m;
  if (m_new > *m) {
    // exp(-inf) is 0, which also clears the first tile's (already zero) state.
    const float c = vgetq_lane_f32(exp4(vdupq_n_f32(*m - m_new)), 0);
    *l *= c;
    for (int d = 0; d < hd; d += 4) vst1q_f32(o + d, vmulq_n_f32(vld1q_f32(o + d), c));
    *m = m_new;
  }
  float32x4_t sum = vdupq_n_f32(0.f);
  for (int j = 0; j < n; j += 4) {
    const float32x4_t e = exp4(vsubq_f32(vld1q_f32(s + j), vdupq_n_f32(m_new)));
    sum = vaddq_f32(sum, e);
    vst1q_f32(s + j, e);
  }
  *l += vaddvq_f32(sum);
}

// Rows [r0, r0 + nr) one by one over shared tiles.
template <DType T>
void attend_each_row(const AttentionArgs& a, const AttnScratch& sc, int r0, int nr) {
  const int hd = a.head_dim;
  sc.reset_rows(nr, hd);
  const int n_pos = visible_end(a, r0 + nr - 1);
  for (int p0 = a.kv_begin, tile_n; p0 < n_pos; p0 += tile_n) {
    tile_n = std::min({n_pos - p0, kTile, a.paging.run(p0)});
    // The rows after this tile's are prefetched meanwhile (next_rows): by the widening of a 16-bit
    // or I8 tile, by the first row's products over an f32 one.
    const NextRows next = next_rows(a, p0 + tile_n, n_pos, hd * kKVElemBytes<T>);
    const float* kt;
    const float* vt;
    kv_tile<T>(a, sc, p0, tile_n, widen_tile<T>, widen_tile_i8, &kt, &vt, next);
    for (int i = 0; i < nr; ++i) {
      const int r = r0 + i, n = std::min(visible_end(a, r) - p0, tile_n);
      if (n <= 0) continue;
      const bool pf = T == DType::F32 && i == 0;
      float* o = sc.acc + int64_t(i) * hd;
      scores(query_row(a, r), kt, pf ? next.k : nullptr, n, hd, a.scale, sc.s);
      softmax_tile(sc.s, n, hd, sc.m + i, sc.l + i, o);
      accumulate_v(sc.s, vt, pf ? next.v : nullptr, n, hd, o);
    }
  }
  for (int i = 0; i < nr; ++i)
    store_block_row(a, r0 + i, result_row(a, r0 + i), sc.m[i], sc.l[i], sc.acc + int64_t(i) * hd,
                    1);
}

template <DType T>
void attention_neon(const AttentionArgs& a) {
  const int hd = a.head_dim;
  if (hd % 8 != 0) {
    attention_rows_ref(a, T);
    return;
  }
  const AttnScratch sc(a.scratch, hd);
  const int n_rows = a.n_tok * a.group;
  for (int r0 = 0; r0 < n_rows; r0 += kRows)
    attend_each_row<T>(a, sc, r0, std::min(n_rows - r0, kRows));
}

}  // namespace

void fill_attention_neon(KernelTable& k) {
  k.attention[type_slot(DType::F32)] = attention_neon<DType::F32>;
  k.attention[type_slot(DType::F16)] = attention_neon<DType::F16>;
  k.attention[type_slot(DType::BF16)] = attention_neon<DType::BF16>;
  k.attention[type_slot(DType::I8)] = attention_neon<DType::I8>;
}

}  // namespace hearth::cpu
