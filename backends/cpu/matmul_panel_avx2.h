// Q4 (with or without a codebook) and Q8 from 16-row panels (q4_panel.h, q8_panel.h) on AVX2: each
// 64-byte panel vector is two 8-lane halves, rows 0-7 and 8-15 of the group, and one token's 4
// activation codes (element order) are broadcast against a half by Dot (vpdpbusd with AVX-VNNI,
// maddubs and madd without). A block's integer dot starts at -offset x its activation code sum (the
// codes are q + offset) and is scaled once per block, token and 8 rows; each (row, token) takes the
// same operations in the same order for any number of tokens, as on AVX-512
// (matmul_q4_panel_avx512.h), so a batched step gives each sequence its own step's floats. The
// copies are the AVX-512 kernels' own: one layout for both ISAs. Include only from the Q4,
// Q4-codebook and Q8 *_avx2.cpp and *_avxvnni.cpp files.
#pragma once
#include "backends/cpu/matmul_quant_avx2.h"
#include "backends/cpu/q8_panel.h"
#include "backends/cpu/quant_dispatch.h"

namespace hearth::cpu::qk {
namespace {

// A panel format F, an object the kernels call: kCodeBytes (of a chunk's codes, before its
// scales), kOffset = 2^kOffsetLog2 (the codes hold q + kOffset), and a block's kPlanes planes:
// plane(chunk, bb, p, h), half h of plane p of block bb, unsigned codes against the activations at
// element act(p) of the block (4 of them, broadcast). act(p) / 4 is the plane's natural dword,
// where the GEMM's panel keeps it.
struct Q4PanelAvx2 {
  static constexpr int64_t kCodeBytes = kQ4PanelCodeBytes;
  static constexpr int kOffsetLog2 = 3, kOffset = 1 << kOffsetLog2, kPlanes = 8;
  // Planes 2q and 2q + 1: the low and high nibbles of vector q.
  static __m256i plane(const uint8_t* chunk, int bb, int p, int h) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i v = load256(chunk + 256 * bb + 64 * (p / 2) + 32 * h);
    return _mm256_and_si256(p % 2 ? _mm256_srli_epi16(v, 4) : v, m4);
  }
  static constexpr int act(int p) { return p % 2 ? 16 + 4 * (p / 2) : 4 * (p / 2); }
};
// Q8's planes are its vectors as stored (q + 128), for vpdpbusd (maddubs' pair sums would overflow
// 16 bits on them: plain AVX2 reads Q8PanelSigned).
struct Q8PanelAvx2 {
  static constexpr int64_t kCodeBytes = kQ8PanelCodeBytes;
  static constexpr int kOffsetLog2 = 7, kOffset = 1 << kOffsetLog2, kPlanes = 8;
  static __m256i plane(const uint8_t* chunk, int bb, int p, int h) {
    return load256(chunk + 512 * bb + 64 * p + 32 * h);
  }
  static constexpr int act(int p) { return 4 * p; }
};

// Q4 with a codebook: Q4's planes looked up (vpshufb) as the levels + Offset: 128, unsigned for
// vpdpbusd (AVX-VNNI, and its int8 GEMM: kOffsetLog2), or 0, the signed levels for DotSigned (plain
// AVX2).
template <int Offset>
struct Q4CbPanelOf {
  static constexpr int64_t kCodeBytes = kQ4PanelCodeBytes;
  static constexpr int kOffset = Offset, kOffsetLog2 = 7, kPlanes = 8;
  __m256i lut;  // the 16 levels + Offset in each 128-bit lane (+128 flips the sign bit)
  explicit Q4CbPanelOf(const int8_t* codebook)
      : lut(_mm256_xor_si256(_mm256_broadcastsi128_si256(
                                 _mm_loadu_si128(reinterpret_cast<const __m128i*>(codebook))),
                             _mm256_set1_epi8(char(Offset)))) {}
  __m256i plane(const uint8_t* chunk, int bb, int p, int h) const {
    return _mm256_shuffle_epi8(lut, Q4PanelAvx2::plane(chunk, bb, p, h));
  }
  static constexpr int act(int p) { return Q4PanelAvx2::act(p); }
};
using Q4CbPanelAvx2 = Q4CbPanelOf<128>;
using Q4CbPanelSigned = Q4CbPanelOf<0>;

// Q8 without AVX-VNNI: the panel's codes back to signed q (their sign bits flipped again), for
// DotSigned, whose products are exact signed ones: no offset.
struct Q8PanelSigned {
  static constexpr int64_t kCodeBytes = kQ8PanelCodeBytes;
  static constexpr int kOffset = 0, kPlanes = 8;
  static __m256i plane(const uint8_t* chunk, int bb, int p, int h) {
    return _mm256_xor_si256(Q8PanelAvx2::plane(chunk, bb, p, h), _mm256_set1_epi8(char(0x80)));
  }
  static constexpr int act(int p) { return Q8PanelAvx2::act(p); }
};
// Dot for Q8PanelSigned's and Q4CbPanelSigned's signed codes w: maddubs on |w| and the activations
// carrying w's sign (pair sums at most 2 x 128 x 127 < 2^15), widened at every step.
struct DotSigned {
  static __m256i begin(__m256i init) { return init; }
  static __m256i step(__m256i block, __m256i w, __m256i s) {
    return _mm256_add_epi32(block, dot_u8s8(_mm256_abs_epi8(w), _mm256_sign_epi8(s, w)));
  }
  static __m256i end(__m256i block, __m256i) { return block; }
};

template <class F, int G>
constexpr int64_t chunk_bytes() {
  return F::kCodeBytes + q4_panel_scale_bytes(G);
}

// How far ahead of a group's stream decode prefetches (into L1): the hardware prefetchers alone
// fall short on these streams, as on AVX-512 (bench/RESULTS.md, "Q4 as 16-row panels").
constexpr int64_t kPanelAheadAvx2 = 2048;

template <class F, int G>
inline void prefetch_panel_chunk(const uint8_t* chunk) {
  for (int64_t b = 0; b < chunk_bytes<F, G>(); b += 64)
    _mm_prefetch(reinterpret_cast<const char*>(chunk + kPanelAheadAvx2 + b), _MM_HINT_T0);
}

// Block bb's scales of rows 8h .. 8h + 7 of a chunk, as f32.
template <class F, int G, DType ST>
inline __m256 half_scales(const uint8_t* chunk, int bb, int h) {
  const int slot = bb * q4_panel_slots(G) / 4;
  return widen_scales8(ST, _mm_loadu_si128(reinterpret_cast<const __m128i*>(chunk + F::kCodeBytes +
                                                                            32 * slot + 16 * h)));
}

inline __m256i broadcast4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}

inline __m256i block_init(const PanelActs& x, int kOffset, int64_t t, int64_t b) {
  return _mm256_set1_epi32(-kOffset * x.code_sum(t, b));
}

// One token against one group (the last of an odd count), both halves in one pass over its
// stream, each half's even and odd planes in two integer chains (four in flight): y[0..16).
template <class F, class Dot, int G, DType ST>
inline void panel_group_token(const F& f, const uint8_t* group, const PanelActs& x, float* y) {
  __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t c = 0; c < x.k / kChunk; ++c) {
    const uint8_t* chunk = group + c * chunk_bytes<F, G>();
    prefetch_panel_chunk<F, G>(chunk);
    for (int bb = 0; bb < 4; ++bb) {
      const int64_t b = 4 * c + bb;
      const __m256i init = block_init(x, F::kOffset, 0, b), zero = _mm256_setzero_si256();
      __m256i even[2], odd[2];
      for (int h = 0; h < 2; ++h) even[h] = Dot::begin(init), odd[h] = Dot::begin(zero);
      for (int p = 0; p < F::kPlanes; ++p) {
        const __m256i xp = broadcast4(x.codes(0, b) + F::act(p));
        for (int h = 0; h < 2; ++h) {
          __m256i& d = p % 2 ? odd[h] : even[h];
          d = Dot::step(d, f.plane(chunk, bb, p, h), xp);
        }
      }
      const __m256 dx = _mm256_set1_ps(x.scale(0, b));
      for (int h = 0; h < 2; ++h)
        acc[h] = _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(_mm256_add_epi32(Dot::end(even[h], init), Dot::end(odd[h], zero))),
            _mm256_mul_ps(half_scales<F, G, ST>(chunk, bb, h), dx), acc[h]);
    }
  }
  _mm256_storeu_ps(y, acc[0]);
  _mm256_storeu_ps(y + 8, acc[1]);
}

// One token against two groups at once, each its own stream, one integer chain per half (four in
// flight, two streams): on one Zen 5 thread the 0.6B's Q4 body reads 29-30 GB/s this way against
// 24-25 from one group at a time, as fast as the AVX-512 panels in the same runs.
template <class F, class Dot, int G, DType ST>
inline void panel_group_pair(const F& f, const uint8_t* g0, const uint8_t* g1, const PanelActs& x,
                             float* y0, float* y1) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  for (int64_t c = 0; c < x.k / kChunk; ++c) {
    const uint8_t* chunk[2] = {g0 + c * chunk_bytes<F, G>(), g1 + c * chunk_bytes<F, G>()};
    prefetch_panel_chunk<F, G>(chunk[0]);
    prefetch_panel_chunk<F, G>(chunk[1]);
    for (int bb = 0; bb < 4; ++bb) {
      const int64_t b = 4 * c + bb;
      const __m256i init = block_init(x, F::kOffset, 0, b);
      __m256i d[4];
      for (int i = 0; i < 4; ++i) d[i] = Dot::begin(init);
      for (int p = 0; p < F::kPlanes; ++p) {
        const __m256i xp = broadcast4(x.codes(0, b) + F::act(p));
        for (int i = 0; i < 4; ++i) d[i] = Dot::step(d[i], f.plane(chunk[i / 2], bb, p, i % 2), xp);
      }
      const __m256 dx = _mm256_set1_ps(x.scale(0, b));
      for (int i = 0; i < 4; ++i)
        acc[i] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(Dot::end(d[i], init)),
                                 _mm256_mul_ps(half_scales<F, G, ST>(chunk[i / 2], bb, i % 2), dx),
                                 acc[i]);
    }
  }
  _mm256_storeu_ps(y0, acc[0]);
  _mm256_storeu_ps(y0 + 8, acc[1]);
  _mm256_storeu_ps(y1, acc[2]);
  _mm256_storeu_ps(y1 + 8, acc[3]);
}

// T tokens (1-4: their accumulators and integer chains fill the 16 registers) against half h of
// one group: y[t * ldy + i] for its 8 rows i. pf: prefetch the stream (the group's first pass).
template <class F, class Dot, int G, DType ST, int T>
inline void panel_half_tokens(const F& f, const uint8_t* group, int h, const PanelActs& x, int t0,
                              float* y, int64_t ldy, bool pf) {
  const int64_t k = x.k;
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t c = 0; c < k / kChunk; ++c) {
    const uint8_t* chunk = group + c * chunk_bytes<F, G>();
    if (pf) prefetch_panel_chunk<F, G>(chunk);
    for (int bb = 0; bb < 4; ++bb) {
      const int64_t b = 4 * c + bb;
      __m256i d[T];
      const int8_t* xq = x.codes(t0, b);
      for (int t = 0; t < T; ++t) d[t] = Dot::begin(block_init(x, F::kOffset, t0 + t, b));
#pragma GCC unroll 8
      for (int p = 0; p < F::kPlanes; ++p) {
        const __m256i v = f.plane(chunk, bb, p, h);
#pragma GCC unroll 4
        for (int t = 0; t < T; ++t)
          d[t] = Dot::step(d[t], v, broadcast4(xq + kBlock * t + F::act(p)));
      }
      const __m256 ws = half_scales<F, G, ST>(chunk, bb, h);
      for (int t = 0; t < T; ++t)
        acc[t] = _mm256_fmadd_ps(
            _mm256_cvtepi32_ps(Dot::end(d[t], block_init(x, F::kOffset, t0 + t, b))),
            _mm256_mul_ps(ws, _mm256_set1_ps(x.scale(t0 + t, b))), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) _mm256_storeu_ps(y + t * ldy + 8 * h, acc[t]);
}

// Tokens [t0, t0 + n) (n <= 4) against half h of a group, as one call of exactly n.
template <class F, class Dot, int G, DType ST, int T = 4>
inline void panel_half_tail(const F& f, const uint8_t* group, int h, const PanelActs& x, int t0,
                            int n, float* y, int64_t ldy, bool pf) {
  if constexpr (T > 0) {
    if (n == T) return panel_half_tokens<F, Dot, G, ST, T>(f, group, h, x, t0, y, ldy, pf);
    panel_half_tail<F, Dot, G, ST, T - 1>(f, group, h, x, t0, n, y, ldy, pf);
  }
}

// Whole groups [g0, g1) (row indices, multiples of 16) for n tokens (at most a token tile): y row
// r - y_row0. One token reads two groups at a time, [g0, g0 + half) beside [g0 + half, g0 + 2
// half); several take a group half by half and four tokens at a time, from L1 after the first
// pass (a group is 9-54 KiB at the 0.6B's widths).
template <class F, class Dot, int G, DType ST>
void panel_decode_avx2(const F& f, const uint8_t* panel, int64_t g0, int64_t g1, const PanelActs& x,
                       int n, float* y, int64_t ldy, int64_t y_row0) {
  const int64_t gb = x.k / kChunk * chunk_bytes<F, G>();
  auto group = [&](int64_t r) { return panel + r / kQ4PanelRows * gb; };
  if (n == 1) {
    const int64_t half = (g1 - g0) / (2 * kQ4PanelRows) * kQ4PanelRows;
    for (int64_t r = g0; r < g0 + half; r += kQ4PanelRows)
      panel_group_pair<F, Dot, G, ST>(f, group(r), group(r + half), x, y + r - y_row0,
                                      y + r + half - y_row0);
    if (g0 + 2 * half < g1)
      panel_group_token<F, Dot, G, ST>(f, group(g1 - kQ4PanelRows), x,
                                       y + g1 - kQ4PanelRows - y_row0);
    return;
  }
  for (int64_t r = g0; r < g1; r += kQ4PanelRows)
    for (int h = 0; h < 2; ++h)
      for (int t = 0; t < n; t += 4)
        panel_half_tail<F, Dot, G, ST>(f, group(r), h, x, t, n - t < 4 ? n - t : 4,
                                       y + t * ldy + (r - y_row0), ldy, h == 0 && t == 0);
}

// Whole 16-row groups from the panel copy (a.w_il) of format f, the rows around them by `rows`
// (the row-major kernel, from w). gemm(a, g0, g1, G, ST) (the last two as std::integral_constant)
// runs a long step's whole groups where the ISA has an int8 GEMM and returns whether it did;
// otherwise every step goes through the decode kernels, a token tile at a time.
template <class F, class Dot, int G, DType ST, class Rows, class Gemm>
void matmul_panel_avx2(const QuantMatmulArgs& a, const F& f, Rows rows, Gemm gemm) {
  const auto* panel = static_cast<const uint8_t*>(a.w_il);
  const int64_t k = a.k;
  const auto [g0, g1] = whole_groups(a.r0, a.r1, kQ4PanelRows);
  const bool from_w = rows_outside_groups(a, {g0, g1}, rows);
  if (g0 >= g1 ||
      gemm(a, g0, g1, std::integral_constant<int, G>(), std::integral_constant<DType, ST>()))
    return;
  ActTile at;
  carve_act_tile(a.scratch, k, &at);
  auto* sum = reinterpret_cast<int32_t*>(at.s);
  const bool reuse = a.reuse_x && !from_w && a.n_tokens <= kTokenTile;
  for (int t0 = 0; t0 < a.n_tokens; t0 += kTokenTile) {
    const int n = int(min64(kTokenTile, a.n_tokens - t0));
    for (int t = 0; t < n && !reuse; ++t)
      quantize_act_blocks_avx2(a.x + (t0 + t) * a.ldx, k, at.q + kBlock * t, at.d + t, sum + t, n);
    panel_decode_avx2<F, Dot, G, ST>(f, panel, g0, g1, PanelActs{at.q, at.d, sum, k, n}, n,
                                     a.y + t0 * a.ldy, a.ldy, a.r0);
  }
}

// A QuantMatmulFn of an AVX2 file: row-major codes (no copy) through rows, a panel copy of format
// f through matmul_panel_avx2 with the file's Dot and gemm.
template <class Dot, class F, class Rows, class Gemm>
void matmul_avx2_panels(const QuantMatmulArgs& a, const F& f, Rows rows, Gemm gemm) {
  if (!a.w_il) return rows(a);
  with_group_scales(a.group, a.scale_dtype, [&](auto g, auto st) {
    matmul_panel_avx2<F, Dot, decltype(g)::value, decltype(st)::value>(a, f, rows, gemm);
  });
}

// The GEMM's panel (pack_panel's layout: 16 rows, [k / 4][16] dwords of unsigned codes) from one
// group of a format-F copy: its vectors are already rows in lanes, so each plane is stored where
// its natural dword goes.
template <class F, int G, DType ST, int PanelRows>
void panel_for_gemm_avx2(const F& f, const uint8_t* group, int64_t k, uint32_t* gemm_panel,
                         float* scales) {
  static_assert(PanelRows == kQ4PanelRows, "a GEMM panel is one group");
  for (int64_t c = 0; c < k / kChunk; ++c) {
    const uint8_t* chunk = group + c * chunk_bytes<F, G>();
    for (int bb = 0; bb < 4; ++bb) {
      for (int p = 0; p < F::kPlanes; ++p) {
        const int64_t dw = 8 * (4 * c + bb) + F::act(p) / 4;
        for (int h = 0; h < 2; ++h)
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(gemm_panel + dw * PanelRows + 8 * h),
                              f.plane(chunk, bb, p, h));
      }
      for (int h = 0; h < 2; ++h)
        _mm256_storeu_ps(scales + (4 * c + bb) * PanelRows + 8 * h,
                         half_scales<F, G, ST>(chunk, bb, h));
    }
  }
}

}  // namespace
}  // namespace hearth::cpu::qk
