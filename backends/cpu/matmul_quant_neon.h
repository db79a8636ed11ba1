// NEON pieces shared by matmul_q8_neon.cpp, matmul_q4_neon.cpp and matmul_q4cb_neon.cpp (weights as
// in quant/FORMAT.md: 128-element chunks in slot order, 4-byte lane i of a full chunk in block i
// mod 4); include only from *_neon.cpp files. Everything is in an anonymous namespace, so no copy
// of these functions can be shared with another file.
//
// Both the weight codes and the int8 activations are signed, so SDOT (and the plain NEON
// multiply-widen-pairwise-add that stands in for it) needs no offset correction: one 16-byte
// register holds lanes 4j .. 4j + 3 of a chunk half, i.e. blocks 0..3, and its four 32-bit lane
// dots are the four blocks' partial sums. The same kernel runs decode and prefill: activations are
// quantized once per tile of 32 tokens and every weight row is read once per tile.
//
// SDOT is an extension: only functions marked HEARTH_NEON_DOTPROD are compiled for it, and they
// are reached only through the *_sdot entry points, which the fill functions install only when the
// CPU reports dotprod. The shared templates below carry no target, so their plain instantiations
// never contain an SDOT; in the SDOT entry points, `flatten` inlines them into the dotprod context.
#pragma once
#include <arm_neon.h>

#include <cstring>
#include <type_traits>

#include "backends/cpu/matmul_quant.h"

// Whether the compiler can emit SDOT inside a function-level target (GCC always; Clang's
// arm_neon.h hid the intrinsics behind -march until its headers moved to target attributes).
#if defined(__ARM_FEATURE_DOTPROD) || !defined(__clang__) || __clang_major__ >= 18
#define HEARTH_NEON_HAVE_SDOT 1
#if defined(__clang__)
#define HEARTH_NEON_DOTPROD __attribute__((target("dotprod")))
#else
#define HEARTH_NEON_DOTPROD __attribute__((target("+dotprod")))
#endif
#else
#define HEARTH_NEON_HAVE_SDOT 0
#endif

namespace hearth::cpu::qk {
namespace {

inline int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

inline float scale_f32(DType t, uint16_t s) {
  if (t == DType::BF16) {
    const uint32_t u = uint32_t(s) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(s))), 0);
}

inline float32x4_t scales4_f32(DType t, const uint16_t* s) {
  const uint16x4_t h = vld1_u16(s);
  return t == DType::BF16 ? vreinterpretq_f32_u32(vshll_n_u16(h, 16))
                          : vcvt_f32_f16(vreinterpret_f16_u16(h));
}

// out[b] = the f32 scale of block b's group, for the nb blocks of one row (per_group: blocks per
// group, 1, 2 or 4).
inline void block_scales(DType t, const uint16_t* s, int per_group, int64_t nb, float* out) {
  const int64_t ng = nb / per_group;
  int64_t g = 0;
  for (; g + 4 <= ng; g += 4) {
    const float32x4_t v = scales4_f32(t, s + g);
    float* o = out + g * per_group;
    if (per_group == 1) {
      vst1q_f32(o, v);
    } else if (per_group == 2) {
      vst1q_f32(o, vzip1q_f32(v, v));
      vst1q_f32(o + 4, vzip2q_f32(v, v));
    } else {
      vst1q_f32(o, vdupq_laneq_f32(v, 0));
      vst1q_f32(o + 4, vdupq_laneq_f32(v, 1));
      vst1q_f32(o + 8, vdupq_laneq_f32(v, 2));
      vst1q_f32(o + 12, vdupq_laneq_f32(v, 3));
    }
  }
  for (; g < ng; ++g)
    for (int i = 0; i < per_group; ++i) out[g * per_group + i] = scale_f32(t, s[g]);
}

// Transposes 4 registers seen as 4x4 matrices of 32-bit lanes: lane j of r[i] <-> lane i of r[j].
// Slot order <-> element order for a full chunk half: r[j] = slot lanes 4j .. 4j + 3 (blocks 0..3)
// becomes r[b] = block b's 16 elements of that half, in order; and back.
inline void transpose4x4_32(int8x16_t* r) {
  const int32x4_t a0 = vreinterpretq_s32_s8(r[0]), a1 = vreinterpretq_s32_s8(r[1]);
  const int32x4_t a2 = vreinterpretq_s32_s8(r[2]), a3 = vreinterpretq_s32_s8(r[3]);
  const int64x2_t t0 = vreinterpretq_s64_s32(vtrn1q_s32(a0, a1));
  const int64x2_t t1 = vreinterpretq_s64_s32(vtrn2q_s32(a0, a1));
  const int64x2_t t2 = vreinterpretq_s64_s32(vtrn1q_s32(a2, a3));
  const int64x2_t t3 = vreinterpretq_s64_s32(vtrn2q_s32(a2, a3));
  r[0] = vreinterpretq_s8_s64(vtrn1q_s64(t0, t2));
  r[1] = vreinterpretq_s8_s64(vtrn1q_s64(t1, t3));
  r[2] = vreinterpretq_s8_s64(vtrn2q_s64(t0, t2));
  r[3] = vreinterpretq_s8_s64(vtrn2q_s64(t1, t3));
}

// The codes of quantize_act_scalar's definition (scale amax / 127, x * (127 / amax) rounded to
// nearest even) in slot order, block scales in d; no code sums, as signed dots need no offsets.
inline void quantize_act_neon(const float* x, int64_t k, int8_t* q, float* d) {
  for (int64_t c0 = 0; c0 < k; c0 += kChunk) {
    const int m = int(min64(kChunk, k - c0) / kBlock);
    int8x16_t h[2][4];  // [half][block]: the block's 16 codes of that half, in element order
    for (int b = 0; b < m; ++b) {
      const float* xb = x + c0 + 32 * b;
      float32x4_t v[8];
      for (int i = 0; i < 8; ++i) v[i] = vld1q_f32(xb + 4 * i);
      float32x4_t mx = vabsq_f32(v[0]);
      for (int i = 1; i < 8; ++i) mx = vmaxq_f32(mx, vabsq_f32(v[i]));
      const float amax = vmaxvq_f32(mx);
      const float inv = amax > 0.f ? 127.f / amax : 0.f;
      int16x8_t s[4];
      for (int i = 0; i < 4; ++i)
        s[i] = vcombine_s16(vmovn_s32(vcvtnq_s32_f32(vmulq_n_f32(v[2 * i], inv))),
                            vmovn_s32(vcvtnq_s32_f32(vmulq_n_f32(v[2 * i + 1], inv))));
      h[0][b] = vcombine_s8(vmovn_s16(s[0]), vmovn_s16(s[1]));
      h[1][b] = vcombine_s8(vmovn_s16(s[2]), vmovn_s16(s[3]));
      d[(c0 + 32 * b) / kBlock] = amax / 127.f;
    }
    if (m == 4) {
      for (int hh = 0; hh < 2; ++hh) {
        transpose4x4_32(h[hh]);
        for (int j = 0; j < 4; ++j) vst1q_s8(q + c0 + 64 * hh + 16 * j, h[hh][j]);
      }
      continue;
    }
    int8_t nat[kChunk];
    for (int b = 0; b < m; ++b) {
      vst1q_s8(nat + 32 * b, h[0][b]);
      vst1q_s8(nat + 32 * b + 16, h[1][b]);
    }
    for (int b = 0; b < m; ++b)
      for (int hh = 0; hh < 2; ++hh)
        for (int qq = 0; qq < 4; ++qq)
          for (int e = 0; e < 4; ++e)
            q[c0 + 16 * m * hh + 4 * (m * qq + b) + e] = nat[32 * b + 16 * hh + 4 * qq + e];
  }
}

// Integer lane dots. add2 adds the 4-byte lane dots of two register pairs to the accumulator;
// finish gives the four 32-bit lane sums (blocks 0..3 of a full chunk).
struct DotPlain {
  static constexpr int kTokens = 1;  // tokens per pass: the int16/int32 partials fill the registers
  struct Acc {
    int32x4_t lo, hi;  // pair sums of lanes 0-1 (lo) and 2-3 (hi)
  };
  static Acc zero() { return {vdupq_n_s32(0), vdupq_n_s32(0)}; }
  // Two products of int8 values, one of them at most 127 in magnitude, fit in int16.
  static void add2(Acc& a, int8x16_t w0, int8x16_t x0, int8x16_t w1, int8x16_t x1) {
    int16x8_t pl = vmull_s8(vget_low_s8(w0), vget_low_s8(x0));
    int16x8_t ph = vmull_high_s8(w0, x0);
    pl = vmlal_s8(pl, vget_low_s8(w1), vget_low_s8(x1));
    ph = vmlal_high_s8(ph, w1, x1);
    a.lo = vpadalq_s16(a.lo, pl);
    a.hi = vpadalq_s16(a.hi, ph);
  }
  static int32x4_t finish(const Acc& a) { return vpaddq_s32(a.lo, a.hi); }
};

#if HEARTH_NEON_HAVE_SDOT
struct DotSdot {
  static constexpr int kTokens = 2;  // two tokens share each weight register
  using Acc = int32x4_t;
  static Acc zero() { return vdupq_n_s32(0); }
  HEARTH_NEON_DOTPROD static void add2(Acc& a, int8x16_t w0, int8x16_t x0, int8x16_t w1,
                                       int8x16_t x1) {
    a = vdotq_s32(vdotq_s32(a, w0, x0), w1, x1);
  }
  static int32x4_t finish(const Acc& a) { return a; }
};
#endif

// Codes (Q8, Q4 or Q4 with a codebook) are built from the codebook pointer (QuantMatmulArgs or
// Tensor; only the codebook variant reads it, so its table is loaded once per call) and provide:
// kChunkBytes (bytes per full chunk); kShift, pair() yields the int8 values q << kShift;
// pair(chunk, j, w0, w1), the weight registers meeting activation bytes 16j .. 16j + 15 of half 0
// (w0) and of half 1 (w1) of a full chunk; and code(chunk, m, p, h), the value q at slot p of half
// h of a chunk of m blocks. Every q and activation code is in [-127, 127] (Q4's in [-8, 7]).

// Signed lane dots of a short last chunk (m < 4 blocks: lane i in block i mod m), per block.
template <class Codes>
inline void tail_dots(const Codes& cd, const uint8_t* w, const int8_t* x, int m, int32_t* isum) {
  const int half = 16 * m;
  for (int b = 0; b < m; ++b) isum[b] = 0;
  for (int p = 0; p < half; ++p)
    isum[(p / 4) % m] +=
        cd.code(w, m, p, 0) * int32_t(x[p]) + cd.code(w, m, p, 1) * int32_t(x[half + p]);
}

// What one (row block, token block) pass needs: NR weight rows with their per-block scales, and
// NT tokens' slot-ordered int8 codes with their per-block scales.
template <int NR, int NT>
struct Tile {
  const uint8_t* w[NR];
  const float* sw[NR];
  const int8_t* xq[NT];
  const float* dx[NT];
};

// dot[t][r] for NR rows and NT tokens over a whole row of k elements. Each chunk's integer lane
// dots are exact; they are scaled once per chunk by (weight scale x activation scale) of each
// lane's block, one vector of 4 factors. The small loops are unrolled so that the accumulators stay
// in registers.
template <class Codes, class Dot, int NR, int NT>
inline void tile_dots(const Codes& cd, const Tile<NR, NT>& tl, int64_t k, float (*dot)[NR]) {
  const int64_t nc = k / kChunk, kc = nc * kChunk;
  constexpr float kScale = 1.f / float(1 << Codes::kShift);
  float32x4_t acc[NT][NR];
#pragma GCC unroll 8
  for (int i = 0; i < NT * NR; ++i) acc[i / NR][i % NR] = vdupq_n_f32(0.f);
  for (int64_t c = 0; c < nc; ++c) {
    typename Dot::Acc ia[NT][NR];
#pragma GCC unroll 8
    for (int i = 0; i < NT * NR; ++i) ia[i / NR][i % NR] = Dot::zero();
#pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      int8x16_t x0[NT], x1[NT];
#pragma GCC unroll 2
      for (int t = 0; t < NT; ++t) {
        x0[t] = vld1q_s8(tl.xq[t] + c * kChunk + 16 * j);
        x1[t] = vld1q_s8(tl.xq[t] + c * kChunk + 64 + 16 * j);
      }
#pragma GCC unroll 8
      for (int i = 0; i < NR * NT; ++i) {
        const int r = i / NT, t = i % NT;
        int8x16_t w0, w1;
        cd.pair(tl.w[r] + c * Codes::kChunkBytes, j, w0, w1);  // reloads CSE across t
        Dot::add2(ia[t][r], w0, x0[t], w1, x1[t]);
      }
    }
#pragma GCC unroll 8
    for (int i = 0; i < NT * NR; ++i) {
      const int t = i / NR, r = i % NR;
      const float32x4_t f = vmulq_f32(vld1q_f32(tl.sw[r] + 4 * c), vld1q_f32(tl.dx[t] + 4 * c));
      acc[t][r] = vfmaq_f32(acc[t][r], vcvtq_f32_s32(Dot::finish(ia[t][r])), f);
    }
  }
  for (int t = 0; t < NT; ++t)
    for (int r = 0; r < NR; ++r) dot[t][r] = kScale * vaddvq_f32(acc[t][r]);
  if (kc < k) {  // a shorter last chunk of m blocks
    const int m = int((k - kc) / kBlock);
    const int64_t b0 = kc / kBlock;
    for (int r = 0; r < NR; ++r)
      for (int t = 0; t < NT; ++t) {
        int32_t isum[4];
        tail_dots(cd, tl.w[r] + nc * Codes::kChunkBytes, tl.xq[t] + kc, m, isum);
        for (int b = 0; b < m; ++b)
          dot[t][r] += tl.sw[r][b0 + b] * tl.dx[t][b0 + b] * float(isum[b]);
      }
  }
}

// Scratch (floats): the token tile's codes [kTokenTile][k] bytes and block scales
// [kTokenTile][k / 32], then 4 rows' block scales [4][k / 32]: about 9.2 k, within
// quant_matmul_scratch_floats.
template <class Codes, class Dot>
inline void matmul_int8(const QuantMatmulArgs& a) {
  const int64_t k = a.k, nb = k / kBlock, ng = k / a.group;
  const int per_group = a.group / int(kBlock);
  const int64_t row_bytes = nb * Codes::kChunkBytes / 4;
  const Codes cd(a.codebook);
  const auto* codes = static_cast<const uint8_t*>(a.w);
  const auto* scales = static_cast<const uint16_t*>(a.scales);
  auto* xq = reinterpret_cast<int8_t*>(a.scratch);
  float* dx = a.scratch + kTokenTile * k / 4;
  float* sw = dx + kTokenTile * nb;

  auto rows = [&](auto nr_tag, int64_t r, int t0, int nt) {
    constexpr int NR = decltype(nr_tag)::value;
    const uint8_t* w[NR];
    const float* s[NR];
    for (int i = 0; i < NR; ++i) {
      w[i] = codes + (r + i) * row_bytes;
      block_scales(a.scale_dtype, scales + (r + i) * ng, per_group, nb, sw + i * nb);
      s[i] = sw + i * nb;
    }
    auto pass = [&](auto nt_tag, int t) {
      constexpr int NT = decltype(nt_tag)::value;
      Tile<NR, NT> tl;
      for (int i = 0; i < NR; ++i) tl.w[i] = w[i], tl.sw[i] = s[i];
      for (int u = 0; u < NT; ++u) tl.xq[u] = xq + (t + u) * k, tl.dx[u] = dx + (t + u) * nb;
      float dot[NT][NR];
      tile_dots<Codes, Dot, NR, NT>(cd, tl, k, dot);
      for (int u = 0; u < NT; ++u)
        for (int i = 0; i < NR; ++i) a.y[(t0 + t + u) * a.ldy + (r - a.r0) + i] = dot[u][i];
    };
    int t = 0;
    for (; t + Dot::kTokens <= nt; t += Dot::kTokens)
      pass(std::integral_constant<int, Dot::kTokens>(), t);
    for (; t < nt; ++t) pass(std::integral_constant<int, 1>(), t);
  };

  // With one token tile the previous call's activations are still in the scratch (reuse_x).
  const bool reuse = a.reuse_x && a.n_tokens <= kTokenTile;
  for (int t0 = 0; t0 < a.n_tokens; t0 += kTokenTile) {
    const int nt = int(min64(kTokenTile, a.n_tokens - t0));
    for (int t = 0; t < nt && !reuse; ++t)
      quantize_act_neon(a.x + (t0 + t) * a.ldx, k, xq + t * k, dx + t * nb);
    int64_t r = a.r0;
    for (; r + 4 <= a.r1; r += 4) rows(std::integral_constant<int, 4>(), r, t0, nt);
    for (; r < a.r1; ++r) rows(std::integral_constant<int, 1>(), r, t0, nt);
  }
}

// The two entry points per code type; `flatten` keeps the whole kernel one function, so in the
// SDOT one every inlined helper is compiled for dotprod.
template <class Codes>
__attribute__((flatten)) void matmul_plain(const QuantMatmulArgs& a) {
  matmul_int8<Codes, DotPlain>(a);
}
#if HEARTH_NEON_HAVE_SDOT
template <class Codes>
HEARTH_NEON_DOTPROD __attribute__((flatten)) void matmul_sdot(const QuantMatmulArgs& a) {
  matmul_int8<Codes, DotSdot>(a);
}
#endif

// Rounds 4 floats to bf16 (nearest even; the values are finite).
inline uint16x4_t to_bf16x4(float32x4_t f) {
  const uint32x4_t u = vreinterpretq_u32_f32(f);
  const uint32x4_t odd = vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1));
  return vshrn_n_u32(vaddq_u32(u, vaddq_u32(vdupq_n_u32(0x7FFF), odd)), 16);
}

// 16 int8 codes times a scale, to dst[0..16) as f32 or bf16.
template <bool BF16>
inline void store16(void* dst, int8x16_t q, float scale) {
  const int16x8_t lo = vmovl_s8(vget_low_s8(q)), hi = vmovl_high_s8(q);
  const int32x4_t v[4] = {vmovl_s16(vget_low_s16(lo)), vmovl_high_s16(lo),
                          vmovl_s16(vget_low_s16(hi)), vmovl_high_s16(hi)};
  for (int i = 0; i < 4; ++i) {
    const float32x4_t f = vmulq_n_f32(vcvtq_f32_s32(v[i]), scale);
    if constexpr (BF16)
      vst1_u16(static_cast<uint16_t*>(dst) + 4 * i, to_bf16x4(f));
    else
      vst1q_f32(static_cast<float*>(dst) + 4 * i, f);
  }
}

// One row in element order (q times its group's scale, exactly as quant::dequantize_row), as f32
// or bf16.
template <class Codes, bool BF16>
inline void dequant_row(const Codes& cd, const uint8_t* w, const uint16_t* scales, DType st,
                        int group, int64_t k, void* dst) {
  constexpr size_t esz = BF16 ? 2 : 4;
  auto* out = static_cast<uint8_t*>(dst);
  const int64_t kc = k / kChunk * kChunk;
  for (int64_t c0 = 0; c0 < kc; c0 += kChunk) {
    const uint8_t* c = w + c0 / kChunk * Codes::kChunkBytes;
    int8x16_t h[2][4];
    for (int j = 0; j < 4; ++j) {
      cd.pair(c, j, h[0][j], h[1][j]);
      if constexpr (Codes::kShift > 0) {
        h[0][j] = vshrq_n_s8(h[0][j], Codes::kShift);
        h[1][j] = vshrq_n_s8(h[1][j], Codes::kShift);
      }
    }
    transpose4x4_32(h[0]);
    transpose4x4_32(h[1]);
    for (int b = 0; b < 4; ++b) {
      const float s = scale_f32(st, scales[(c0 + 32 * b) / group]);
      store16<BF16>(out + size_t(c0 + 32 * b) * esz, h[0][b], s);
      store16<BF16>(out + size_t(c0 + 32 * b + 16) * esz, h[1][b], s);
    }
  }
  if (kc < k) {  // a shorter last chunk of m blocks
    const int m = int((k - kc) / kBlock);
    const uint8_t* c = w + kc / kChunk * Codes::kChunkBytes;
    for (int b = 0; b < m; ++b)
      for (int hh = 0; hh < 2; ++hh)
        for (int qq = 0; qq < 4; ++qq)
          for (int e = 0; e < 4; ++e) {
            const int64_t i = kc + 32 * b + 16 * hh + 4 * qq + e;
            const float v =
                float(cd.code(c, m, 4 * (m * qq + b) + e, hh)) * scale_f32(st, scales[i / group]);
            if constexpr (BF16)
              static_cast<uint16_t*>(dst)[i] = f32_to_bf16(v);
            else
              static_cast<float*>(dst)[i] = v;
          }
  }
}

template <class Codes>
void dequant_rows(const Tensor& w, int64_t r0, int64_t n, void* dst, bool bf16) {
  const int64_t k = w.cols();
  const int64_t row_bytes = k / kBlock * Codes::kChunkBytes / 4;
  const auto* codes = static_cast<const uint8_t*>(w.data);
  const auto* scales = static_cast<const uint16_t*>(w.scales);
  const int64_t ng = k / w.group_size;
  const Codes cd(w.codebook);
  for (int64_t r = r0; r < r0 + n; ++r) {
    const uint8_t* c = codes + r * row_bytes;
    const uint16_t* s = scales + r * ng;
    if (bf16)
      dequant_row<Codes, true>(cd, c, s, w.scale_dtype, w.group_size, k,
                               static_cast<uint16_t*>(dst) + (r - r0) * k);
    else
      dequant_row<Codes, false>(cd, c, s, w.scale_dtype, w.group_size, k,
                                static_cast<float*>(dst) + (r - r0) * k);
  }
}

}  // namespace
}  // namespace hearth::cpu::qk
