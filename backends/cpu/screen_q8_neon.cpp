// The 5-bit screen of a Q8 LM head (layout and bound in head_screen.h), NEON. Per 4-row group and
// 128-element chunk, each row's 80 bytes: four 16-byte registers of nibbles (half 0 low, half 1
// high) and one of high bits; register q's bits sit at bit q (half 0) and 4 + q (half 1) of the
// latter, shifted to bit 4 and selected in, giving u = h + 16 in [0, 31], a non-negative int8 that
// meets the same slot-ordered int8 activations as the NEON Q8 kernel on SDOT (dotprod CPUs) or on
// multiply-widen-pairwise-add, lane b of each register summing block b.
#include "backends/cpu/head_screen.h"
#include "backends/cpu/matmul_quant_neon.h"

namespace hearth::cpu {

namespace {

using namespace qk;

template <class Dot>
inline ScreenToken prepare(const ScreenQ8Args& a) {
  const int64_t k = a.k, nc = k / kChunk;
  ActTile at;
  float* rest = carve_act_tile(a.scratch, k, &at);
  const ScreenToken t = screen_token(at.q, at.d, rest, nc, 4);
  if (!a.reuse_x) {
    quantize_act_neon(a.x, k, at.q, at.d);
    const int8x16_t ones = vdupq_n_s8(1);
    for (int64_t j = 0; j < nc; ++j) {
      typename Dot::Acc sum = Dot::zero(), sabs = Dot::zero();
      for (int i = 0; i < 4; ++i) {
        const int8x16_t x0 = vld1q_s8(at.q + j * kChunk + 16 * i);
        const int8x16_t x1 = vld1q_s8(at.q + j * kChunk + 64 + 16 * i);
        Dot::add2(sum, ones, x0, ones, x1);
        Dot::add2(sabs, vabsq_s8(x0), ones, vabsq_s8(x1), ones);
      }
      const int32x4_t s = Dot::finish(sum);
      vst1q_s32(t.init + 4 * j, vnegq_s32(vshlq_n_s32(s, kScreenOffsetLog2)));
      vst1q_f32(t.mid + 4 * j, vmulq_n_f32(vcvtq_f32_s32(s), kScreenMid));
      vst1q_f32(t.abs + 4 * j, vcvtq_f32_s32(Dot::finish(sabs)));
    }
  }
  return t;
}

// Chunk j's 4 block weight scales as f32 (lane b: block b).
template <int G>
inline float32x4_t chunk_scales(DType st, const uint16_t* sw, int64_t j) {
  if constexpr (G == 32) return scales4_f32(st, sw + 4 * j);
  const uint16_t s[4] = {sw[j * 128 / G], sw[(j * 128 + 32) / G], sw[(j * 128 + 64) / G],
                         sw[(j * 128 + 96) / G]};
  return scales4_f32(st, s);
}

// One 4-row group (codes at w, scales at sw): est[r] the estimate and tsum[r] the sum the bound
// scales (head_screen.h).
template <class Dot, int G>
inline void group_dot(const uint8_t* w, const uint16_t* sw, DType st, int64_t ng,
                      const ScreenToken& t, int64_t nc, float* est, float* tsum) {
  const uint8x16_t m4 = vdupq_n_u8(0x0F), b4 = vdupq_n_u8(16);
  float32x4_t acc[4], acct[4];
  for (int r = 0; r < 4; ++r) acc[r] = acct[r] = vdupq_n_f32(0);
  for (int64_t j = 0; j < nc; ++j) {
    const int8_t* x = t.q + j * kChunk;
    const int32x4_t init = vld1q_s32(t.init + 4 * j);
    const float32x4_t mid = vld1q_f32(t.mid + 4 * j);
    const float32x4_t abs = vld1q_f32(t.abs + 4 * j);
    const float32x4_t dx = vld1q_f32(t.d + 4 * j);
    for (int r = 0; r < 4; ++r) {
      const uint8_t* c = w + (4 * j + r) * kScreenQ8ChunkBytes;
      const uint8x16_t high = vld1q_u8(c + 64);
      typename Dot::Acc a = Dot::zero();
      for (int q = 0; q < 4; ++q) {
        const uint8x16_t v = vld1q_u8(c + 16 * q);
        // High bits of half 0 at bit q, of half 1 at bit 4 + q: shifted (signed amounts) to 4.
        const uint8x16_t u0 =
            vbslq_u8(b4, vshlq_u8(high, vdupq_n_s8(int8_t(4 - q))), vandq_u8(v, m4));
        const uint8x16_t u1 =
            vbslq_u8(b4, vshlq_u8(high, vdupq_n_s8(int8_t(-q))), vshrq_n_u8(v, 4));
        Dot::add2(a, vreinterpretq_s8_u8(u0), vld1q_s8(x + 16 * q), vreinterpretq_s8_u8(u1),
                  vld1q_s8(x + 64 + 16 * q));
      }
      const int32x4_t h = vaddq_s32(Dot::finish(a), init);
      // kScreenStep sum h x' + kScreenMid sum x', exact in f32 (under 2^20 in magnitude).
      const float32x4_t e = vfmaq_n_f32(mid, vcvtq_f32_s32(h), float(kScreenStep));
      const float32x4_t f = vmulq_f32(chunk_scales<G>(st, sw + r * ng, j), dx);
      acc[r] = vfmaq_f32(acc[r], e, f);
      acct[r] = vfmaq_f32(acct[r], vabsq_f32(f), abs);
    }
  }
  for (int r = 0; r < 4; ++r) {
    est[r] = vaddvq_f32(acc[r]);
    tsum[r] = vaddvq_f32(acct[r]);
  }
}

template <class Dot, int G>
inline void screen_rows(const ScreenQ8Args& a) {
  const ScreenToken t = prepare<Dot>(a);
  const int64_t k = a.k, nc = k / kChunk, ng = k / G, row_bytes = nc * kScreenQ8ChunkBytes;
  const auto* scales = static_cast<const uint16_t*>(a.scales);
  for (int64_t r = a.r0; r < a.r1; r += 4) {
    float est[4], tsum[4];
    group_dot<Dot, G>(a.codes + r * row_bytes, scales + r * ng, a.scale_dtype, ng, t, nc, est,
                      tsum);
    for (int64_t i = 0; i < min64(4, a.r1 - r); ++i) {
      a.est[r - a.r0 + i] = est[i];
      a.hw[r - a.r0 + i] = tsum[i];
    }
  }
  const float factor = kScreenMid + float(nc + 8) / 32768.f;
  for (int64_t i = 0; i < a.r1 - a.r0; ++i) a.hw[i] *= factor;
}

template <class Dot>
inline void screen_neon(const ScreenQ8Args& a) {
  if (a.group == 32) return screen_rows<Dot, 32>(a);
  if (a.group == 64) return screen_rows<Dot, 64>(a);
  screen_rows<Dot, 128>(a);
}

// The two entry points; `flatten` keeps each one function, so in the SDOT one every inlined
// helper is compiled for dotprod (matmul_quant_neon.h).
__attribute__((flatten)) void screen_q8_plain(const ScreenQ8Args& a) {
  screen_neon<DotPlain>(a);
}
#if HEARTH_NEON_HAVE_SDOT
template <class Dot>
HEARTH_NEON_DOTPROD __attribute__((flatten)) void screen_q8_sdot(const ScreenQ8Args& a) {
  screen_neon<Dot>(a);
}
#endif

}  // namespace

void fill_screen_q8_neon(KernelTable& k, const CpuFeatures& f) {
  k.screen_q8 = screen_q8_plain;
#if HEARTH_NEON_HAVE_SDOT
  if (f.neon_dotprod) k.screen_q8 = screen_q8_sdot<DotSdot>;
#endif
}

}  // namespace hearth::cpu
