// AVX-512 attention: q/out rows f32 [n_tok][group][head_dim] (strided per token), one KV head's
// cache rows [position][head_dim] in F32/F16/BF16/I8; key tiles of 64 positions shared by up to 16
// query rows, online softmax per row. Single rows (decode) read the cache in its own type, in f32
// arithmetic but an I8 cache's on integer dot products (attention_i8_avx512.h) where head_dim is
// whole lines; whole blocks of 16 rows (prefill) widen 16-bit and I8 tiles to f32 (I8 codes times
// their position's scale and, for keys, the channel factors) and are transposed into lanes:
// queries, scores and outputs [element][16 rows].
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/attention_i8_avx512.h"
#include "backends/cpu/attention_scratch.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/ops.h"
#include "backends/cpu/simd_avx512.h"

namespace hearth::cpu {

namespace {

constexpr int kTile = int(kAttnKeyTile);
constexpr int kRows = int(kAttnRowsPerBlock);
static_assert(kTile % 16 == 0, "key tiles are whole vectors");

// Widens rows [p0, p0 + n) of a 16-bit cache into a dense f32 tile.
template <DType T>
void widen_tile(const void* src, int p0, int n, int hd, float* dst, const void* pf) {
  const uint16_t* s = static_cast<const uint16_t*>(src) + int64_t(p0) * hd;
  for (int64_t i = 0; i < int64_t(n) * hd; i += 16) {
    if (pf && i % 32 == 0) prefetch_l2(static_cast<const uint16_t*>(pf) + int64_t(p0) * hd + i);
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + i));
    __m512 f;
    if constexpr (T == DType::F16)
      f = _mm512_cvtph_ps(h);
    else
      f = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    _mm512_storeu_ps(dst + i, f);
  }
}

// Dequantizes rows [p0, p0 + n) of an I8 cache: code * scale[p] * factor[d] (factor null: ones).
void widen_tile_i8(const void* src, const float* scale, const float* factor, int p0, int n, int hd,
                   float* dst, const void* pf) {
  const int8_t* s = static_cast<const int8_t*>(src) + int64_t(p0) * hd;
  for (int j = 0; j < n; ++j)
    for (int d = 0; d < hd; d += 16) {
      if (pf && d % 64 == 0)
        prefetch_l2(static_cast<const int8_t*>(pf) + (int64_t(p0) + j) * hd + d);
      const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + int64_t(j) * hd + d));
      __m512 f =
          _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c)), _mm512_set1_ps(scale[p0 + j]));
      if (factor) f = _mm512_mul_ps(f, _mm512_loadu_ps(factor + d));
      _mm512_storeu_ps(dst + int64_t(j) * hd + d, f);
    }
}

// The per-row kernels below read the cache in its own type L (F32, F16, BF16 or I8 codes): decode
// reads each cache row once, so widening a tile into scratch first only added a write and a read.
// An I8 cache's scales are applied outside the dot products: the key channel factors to the query
// once per call, each position's key scale to its score and its value scale to its weight.
// Element i of p as f32, 16 at a time:
template <DType L>
inline __m512 load16(const void* p, int64_t i) {
  if constexpr (L == DType::F32) {
    return _mm512_loadu_ps(static_cast<const float*>(p) + i);
  } else if constexpr (L == DType::I8) {
    const __m128i c =
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const int8_t*>(p) + i));
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(c));
  } else {
    const __m256i h =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(p) + i));
    if constexpr (L == DType::F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}
template <DType L>
inline const char* at(const void* p, int64_t i) {
  return static_cast<const char*>(p) + i * kKVElemBytes<L>;
}
// Whether the 16 elements at c start a cache line of a row (rows are whole lines: hd % 64 == 0 for
// I8, hd % 32 for 16-bit types; other head sizes prefetch some lines twice, harmlessly).
template <DType L>
constexpr bool line_start(int c) {
  return c * kKVElemBytes<L> % 64 == 0;
}

// Scores of one query row against `n` keys (rows of kt, head_dim hd), scaled (and times ks[j],
// an I8 cache's key scales, when given), into s[0..16*ceil); lanes past n are -inf. Keys past n
// are read from row n-1 so no load leaves the tile. The same rows of pf (the next tile's keys, or
// null) are prefetched meanwhile.
template <DType L>
inline void scores(const float* q, const void* kt, const void* pf, int n, int hd, float scale,
                   const float* ks, float* s) {
  for (int j0 = 0; j0 < n; j0 += 16) {
    __m512 acc[16];
    int64_t rows[16];
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) {
      acc[j] = _mm512_setzero_ps();
      rows[j] = int64_t(j0 + j < n ? j0 + j : n - 1) * hd;
    }
    // Key by key, each row's lines in order (see scores2).
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j)
      for (int c = 0; c < hd; c += 16) {
        if (pf && line_start<L>(c)) prefetch_l1(at<L>(pf, rows[j] + c));
        acc[j] = _mm512_fmadd_ps(_mm512_loadu_ps(q + c), load16<L>(kt, rows[j] + c), acc[j]);
      }
    const int valid = n - j0 < 16 ? n - j0 : 16;
    __m512 r = _mm512_mul_ps(reduce16(acc), _mm512_set1_ps(scale));
    if (ks) r = _mm512_mul_ps(r, _mm512_maskz_loadu_ps(tail_mask16(valid), ks + j0));
    r = _mm512_mask_blend_ps(tail_mask16(valid), _mm512_set1_ps(-INFINITY), r);
    _mm512_storeu_ps(s + j0, r);
  }
}

// The same for two query rows that see the same keys: each key vector loaded once feeds both
// rows, halving the loads per FMA. Lanes 0-7 of each reduction are row 0's, 8-15 row 1's.
template <DType L>
inline void scores2(const float* q0, const float* q1, const void* kt, const void* pf, int n, int hd,
                    float scale, const float* ks, float* s0, float* s1) {
  for (int j0 = 0; j0 < n; j0 += 8) {
    __m512 acc[16];
    int64_t rows[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      acc[j] = acc[j + 8] = _mm512_setzero_ps();
      rows[j] = int64_t(j0 + j < n ? j0 + j : n - 1) * hd;
    }
    // Key by key, each row's lines in order: a cache being read from memory, as decode reads it,
    // took ~20% less time a position this way than element chunk by chunk across the 8 rows
    // (bench/RESULTS.md); each row's sum runs in element order either way.
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j)
      for (int c = 0; c < hd; c += 16) {
        const __m512 k = load16<L>(kt, rows[j] + c);
        if (pf && line_start<L>(c)) prefetch_l1(at<L>(pf, rows[j] + c));
        acc[j] = _mm512_fmadd_ps(_mm512_loadu_ps(q0 + c), k, acc[j]);
        acc[j + 8] = _mm512_fmadd_ps(_mm512_loadu_ps(q1 + c), k, acc[j + 8]);
      }
    const int valid = n - j0 < 8 ? n - j0 : 8;
    __m512 r = _mm512_mul_ps(reduce16(acc), _mm512_set1_ps(scale));
    if (ks) {
      const __m256 f = _mm256_maskz_loadu_ps(__mmask8((1u << valid) - 1u), ks + j0);
      r = _mm512_mul_ps(r, _mm512_insertf32x8(_mm512_castps256_ps512(f), f, 1));
    }
    const __mmask16 m = __mmask16(((1u << valid) - 1u) * 0x101u);
    r = _mm512_mask_blend_ps(m, _mm512_set1_ps(-INFINITY), r);
    _mm256_storeu_ps(s0 + j0, _mm512_castps512_ps256(r));
    _mm256_storeu_ps(s1 + j0, _mm512_extractf32x8_ps(r, 1));
  }
}

// Online softmax over one tile of scores s[0..n) (padded with -inf to whole vectors): rescales the
// row's running sum l and output o to the new maximum m, and leaves exp(s - m) in s.
inline void softmax_tile(float* s, int n, int hd, float* m, float* l, float* o) {
  __m512 mx = _mm512_set1_ps(-INFINITY);
  for (int j = 0; j < n; j += 16) mx = _mm512_max_ps(mx, _mm512_loadu_ps(s + j));
  const float tile_max = hmax16(mx);
  const float m_new = tile_max > *m ? tile_max : *m;
  if (m_new > *m) {
    // exp(-inf) is 0, which also clears the first tile's (already zero) state.
    const __m512 c = exp512(_mm512_set1_ps(*m - m_new));
    *l *= _mm512_cvtss_f32(c);
    for (int d = 0; d < hd; d += 16)
      _mm512_storeu_ps(o + d, _mm512_mul_ps(_mm512_loadu_ps(o + d), c));
    *m = m_new;
  }
  __m512 sum = _mm512_setzero_ps();
  for (int j = 0; j < n; j += 16) {
    const __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(s + j), _mm512_set1_ps(m_new)));
    sum = _mm512_add_ps(sum, e);
    _mm512_storeu_ps(s + j, e);
  }
  *l += hsum16(sum);
}

// o += sum_j e[j] v_j over n value rows; eight vectors of o stay in registers per pass.
template <DType L>
inline void accumulate_v(const float* e, const void* vt, int n, int hd, float* o) {
  int d0 = 0;
  for (; d0 + 128 <= hd; d0 += 128) {
    __m512 ov[8];
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) ov[c] = _mm512_loadu_ps(o + d0 + c * 16);
    for (int j = 0; j < n; ++j) {
      const __m512 ej = _mm512_set1_ps(e[j]);
      const int64_t vr = int64_t(j) * hd + d0;
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) ov[c] = _mm512_fmadd_ps(ej, load16<L>(vt, vr + c * 16), ov[c]);
    }
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) _mm512_storeu_ps(o + d0 + c * 16, ov[c]);
  }
  for (; d0 < hd; d0 += 16) {
    __m512 ov = _mm512_loadu_ps(o + d0);
    for (int j = 0; j < n; ++j)
      ov = _mm512_fmadd_ps(_mm512_set1_ps(e[j]), load16<L>(vt, int64_t(j) * hd + d0), ov);
    _mm512_storeu_ps(o + d0, ov);
  }
}

// The same for two rows: each value vector loaded once feeds both. The same rows of `next` (the
// next tile's values, or null) are prefetched meanwhile.
template <DType L>
inline void accumulate_v2(const float* e0, const float* e1, const void* vt, int n, int hd,
                          float* o0, float* o1, const void* next = nullptr) {
  int d0 = 0;
  for (; d0 + 128 <= hd; d0 += 128) {
    __m512 a[8], b[8];
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      a[c] = _mm512_loadu_ps(o0 + d0 + c * 16);
      b[c] = _mm512_loadu_ps(o1 + d0 + c * 16);
    }
    for (int j = 0; j < n; ++j) {
      const __m512 x = _mm512_set1_ps(e0[j]), y = _mm512_set1_ps(e1[j]);
      const int64_t vr = int64_t(j) * hd + d0;
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        const __m512 v = load16<L>(vt, vr + c * 16);
        if (next && line_start<L>(c * 16)) prefetch_l1(at<L>(next, vr + c * 16));
        a[c] = _mm512_fmadd_ps(x, v, a[c]);
        b[c] = _mm512_fmadd_ps(y, v, b[c]);
      }
    }
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      _mm512_storeu_ps(o0 + d0 + c * 16, a[c]);
      _mm512_storeu_ps(o1 + d0 + c * 16, b[c]);
    }
  }
  if (d0 < hd) {
    accumulate_v<L>(e0, at<L>(vt, d0), n, hd, o0 + d0);
    accumulate_v<L>(e1, at<L>(vt, d0), n, hd, o1 + d0);
  }
}

// An I8 cache's value scales into one or two rows' softmax weights e[0..n) (after the softmax has
// summed them).
inline void value_scales(const float* vs, int n, float* e0, float* e1) {
  for (int j = 0; j < n; j += 16) {
    const __mmask16 m = tail_mask16(n - j < 16 ? n - j : 16);
    const __m512 f = _mm512_maskz_loadu_ps(m, vs + j);
    _mm512_mask_storeu_ps(e0 + j, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, e0 + j), f));
    if (e1) _mm512_mask_storeu_ps(e1 + j, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, e1 + j), f));
  }
}

// Whole blocks of 16 or 32 query rows at once, transposed so that row i lives in lane i % 16 of
// vector i / 16 (prefill). Scores come out as vectors of rows per key, the online softmax runs on
// the rows in lanes, and both products are FMAs of a broadcast key or value element with vectors
// of rows, with no horizontal sums: the per-row path (scores2, accumulate_v2) reached ~45% of the
// f32 FMA peak in a 512-token prefill. With two vectors of rows each broadcast feeds two FMAs.
// The head dimension is fixed at 128 (every Qwen3 size) so a key's or value's elements sit at
// constant offsets from one pointer.
constexpr int kHdT = 128;

// NV vectors of rows; a pass covers W keys (scores) or W channels (outputs), NV x W accumulators.
template <int NV>
constexpr int kPass = 16 / NV;

// acc[j][v] = keys kb[j] . rows of vector v, for the pass's W keys.
template <int NV>
inline void scores_pass(const float* qt, const float* kb, __m512 (&acc)[kPass<NV>][NV]) {
  constexpr int W = kPass<NV>;
#pragma GCC unroll 16
  for (int j = 0; j < W; ++j)
    for (int v = 0; v < NV; ++v) acc[j][v] = _mm512_setzero_ps();
  for (int d = 0; d < kHdT; ++d) {
    __m512 q[NV];
    for (int v = 0; v < NV; ++v) q[v] = _mm512_loadu_ps(qt + 16 * NV * d + 16 * v);
#pragma GCC unroll 16
    for (int j = 0; j < W; ++j) {
      const __m512 k = _mm512_set1_ps(kb[j * kHdT + d]);
      for (int v = 0; v < NV; ++v) acc[j][v] = _mm512_fmadd_ps(k, q[v], acc[j][v]);
    }
  }
}

// ot[d] += sum_j e[j] v_j[d] over n value rows, W output channels (vectors of rows) at a time.
template <int NV>
inline void accumulate_rows(const float* st, const float* vt, int n, float* ot) {
  constexpr int W = kPass<NV>, R = 16 * NV;
  for (int d0 = 0; d0 < kHdT; d0 += W) {
    __m512 acc[W][NV];
#pragma GCC unroll 16
    for (int c = 0; c < W; ++c)
      for (int v = 0; v < NV; ++v) acc[c][v] = _mm512_loadu_ps(ot + R * (d0 + c) + 16 * v);
    const float* vr = vt + d0;
    for (int j = 0; j < n; ++j, vr += kHdT) {
      __m512 e[NV];
      for (int v = 0; v < NV; ++v) e[v] = _mm512_loadu_ps(st + R * j + 16 * v);
#pragma GCC unroll 16
      for (int c = 0; c < W; ++c) {
        const __m512 x = _mm512_set1_ps(vr[c]);
        for (int v = 0; v < NV; ++v) acc[c][v] = _mm512_fmadd_ps(x, e[v], acc[c][v]);
      }
    }
#pragma GCC unroll 16
    for (int c = 0; c < W; ++c)
      for (int v = 0; v < NV; ++v) _mm512_storeu_ps(ot + R * (d0 + c) + 16 * v, acc[c][v]);
  }
}

// Rows q(0..16 NV - 1) seeing positions [kv_begin, end(i)); tile(p0, n, n_pos, &kt, &vt) yields f32
// key and value rows for positions [p0, p0 + n), read in place when kDirect (an f32 cache) and from
// a tile buffer of kTile rows otherwise. Row i's result goes to out(i), as row r0 + i of the
// kernel's (store_block_row).
template <int NV, bool kDirect, class Q, class End, class Tile, class Out>
void attend_rows(const AttentionArgs& a, const AttnScratch& b, Q q, End end, Tile tile, Out out,
                 int r0) {
  constexpr int W = kPass<NV>, R = 16 * NV;
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  alignas(64) int32_t ends[R];
  for (int i = 0; i < R; ++i) {
    const float* qi = q(i);
    for (int d = 0; d < kHdT; ++d) b.qt[R * d + i] = qi[d];
    ends[i] = end(i);
  }
  __m512i vis[NV];
  __m512 m[NV], l[NV];
  for (int v = 0; v < NV; ++v) {
    vis[v] = _mm512_load_si512(ends + 16 * v);
    m[v] = ninf;
    l[v] = _mm512_setzero_ps();
  }
  std::memset(b.acc, 0, sizeof(float) * R * kHdT);
  const int n_pos = ends[R - 1];  // rows are token-major: the last sees most
  for (int p0 = a.kv_begin, tile_n; p0 < n_pos; p0 += tile_n) {
    tile_n = std::min({n_pos - p0, kTile, a.paging.run(p0)});
    const float* kt;
    const float* vt;
    tile(p0, tile_n, n_pos, &kt, &vt);
    __m512 tmax[NV];
    for (int v = 0; v < NV; ++v) tmax[v] = ninf;
    for (int j0 = 0; j0 < tile_n; j0 += W) {
      const int nk = tile_n - j0 < W ? tile_n - j0 : W;
      const float* kb = kt + int64_t(j0) * kHdT;
      if (kDirect && nk < W) {
        std::memcpy(b.pad, kb, sizeof(float) * size_t(nk) * kHdT);
        kb = b.pad;
      }
      __m512 sv[W][NV];
      scores_pass<NV>(b.qt, kb, sv);
      for (int j = 0; j < nk; ++j)
        for (int v = 0; v < NV; ++v) {
          const __mmask16 seen = _mm512_cmpgt_epi32_mask(vis[v], _mm512_set1_epi32(p0 + j0 + j));
          const __m512 s =
              _mm512_mask_blend_ps(seen, ninf, _mm512_mul_ps(sv[j][v], _mm512_set1_ps(a.scale)));
          tmax[v] = _mm512_max_ps(tmax[v], s);
          _mm512_storeu_ps(b.s + R * (j0 + j) + 16 * v, s);
        }
    }
    // Online softmax in lanes. A row that has seen nothing yet keeps m = -inf; exp is taken
    // against 0 there so that -inf - -inf never makes a NaN.
    __m512 base[NV];
    for (int v = 0; v < NV; ++v) {
      const __m512 m_new = _mm512_max_ps(m[v], tmax[v]);
      base[v] = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(m_new, ninf, _CMP_EQ_OQ), m_new,
                                     _mm512_setzero_ps());
      if (_mm512_cmp_ps_mask(m_new, m[v], _CMP_GT_OQ)) {
        const __m512 c = exp512(_mm512_sub_ps(m[v], base[v]));
        l[v] = _mm512_mul_ps(l[v], c);
        for (int d = 0; d < kHdT; ++d) {
          float* o = b.acc + R * d + 16 * v;
          _mm512_storeu_ps(o, _mm512_mul_ps(_mm512_loadu_ps(o), c));
        }
      }
      m[v] = m_new;
    }
    for (int j = 0; j < tile_n; ++j)
      for (int v = 0; v < NV; ++v) {
        float* sj = b.s + R * j + 16 * v;
        const __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(sj), base[v]));
        l[v] = _mm512_add_ps(l[v], e);
        _mm512_storeu_ps(sj, e);
      }
    accumulate_rows<NV>(b.s, vt, tile_n, b.acc);
  }
  alignas(64) float ms[R], ls[R];
  for (int v = 0; v < NV; ++v) {
    _mm512_store_ps(ms + 16 * v, m[v]);
    _mm512_store_ps(ls + 16 * v, l[v]);
  }
  for (int i = 0; i < R; ++i) store_block_row(a, r0 + i, out(i), ms[i], ls[i], b.acc + i, R);
}

// One tile of an I8 cache for the integer path: its key and value codes and scales, its length,
// and the rows to prefetch meanwhile.
struct TileI8 {
  const int8_t* k;
  const int8_t* v;
  const float* ks;
  const float* vs;
  int n, hd;
  NextRows pf;
};

// Rows [i, i + R) that see the same keys, over one tile in integers: scores, the online softmax,
// the weights and the values. Rows' state in sc (m, l, acc); q16 and qf as attend_each_row keeps.
template <int R>
inline void rows_i8(const AttnScratch& sc, const TileI8& t, const int16_t* q16, const float* qf,
                    int i) {
  const int16_t* q[R];
  float* s[R];
  float* o[R];
  for (int r = 0; r < R; ++r) {
    q[r] = q16 + int64_t(i + r) * t.hd;
    s[r] = sc.s + r * kTile;
    o[r] = sc.acc + int64_t(i + r) * t.hd;
  }
  scores_i8<R>(q, qf + i, t.k, t.pf.k, t.n, t.hd, t.ks, s);
  TileWeights w[R];
  for (int r = 0; r < R; ++r) {
    for (int j = t.n; j < (t.n + 15) / 16 * 16; ++j) s[r][j] = -INFINITY;
    softmax_tile(s[r], t.n, t.hd, sc.m + i + r, sc.l + i + r, o[r]);
    tile_weights(s[r], t.vs, t.n, &w[r]);
  }
  accumulate_v_i8<R>(w, t.v, t.n, t.hd, o, t.pf.v);
}

// Rows [r0, r0 + nr) one by one (decode, and blocks short of kRows rows), two at a time where
// two heads of one token share the keys.
template <DType T>
void attend_each_row(const AttentionArgs& a, const AttnScratch& sc, int r0, int nr) {
  auto q_row = [&](int i) { return query_row(a, r0 + i); };
  auto visible = [&](int i) { return visible_end(a, r0 + i); };
  const int hd = a.head_dim;
  float *acc = sc.acc, *m = sc.m, *l = sc.l, *s = sc.s;
  sc.reset_rows(nr, hd);
  const int n_pos = visible(nr - 1);
  const int64_t row_bytes = int64_t(hd) * kKVElemBytes<T>;
  constexpr bool kI8 = T == DType::I8;
  // An I8 cache's key factors go into the queries once (scratch qt holds the scaled rows).
  auto query = [&](int i) -> const float* {
    if (!kI8) return q_row(i);
    return sc.qt + int64_t(i) * hd;
  };
  if (kI8)
    for (int i = 0; i < nr; ++i)
      for (int d = 0; d < hd; ++d)
        sc.qt[int64_t(i) * hd + d] = q_row(i)[d] * (a.k_factor ? a.k_factor[d] : 1.f);
  // ... and, where head_dim is whole 64-byte lines of codes, are rounded for the integer path (into
  // ktile, which these rows leave unused); qf[i] is row i's code scale times the softmax scale.
  const bool int_keys = kI8 && hd % 64 == 0;
  int16_t* q16 = reinterpret_cast<int16_t*>(sc.ktile);
  float qf[kRows];
  if (int_keys)
    for (int i = 0; i < nr; ++i)
      qf[i] = a.scale * round_query16_avx512(sc.qt + int64_t(i) * hd, hd, q16 + int64_t(i) * hd);
  for (int p0 = a.kv_begin, tile_n; p0 < n_pos; p0 += tile_n) {
    tile_n = std::min({n_pos - p0, kTile, a.paging.run(p0)});
    const void* kt = a.paging.row(a.k, p0, row_bytes);
    const void* vt = a.paging.row(a.v, p0, row_bytes);
    const float* ks = kI8 ? static_cast<const float*>(a.paging.row(a.k_scale, p0, 4)) : nullptr;
    const float* vs = kI8 ? static_cast<const float*>(a.paging.row(a.v_scale, p0, 4)) : nullptr;
    const int p1 = p0 + tile_n;
    const NextRows next = next_rows(a, p1, n_pos, row_bytes);
    if (kI8 && p1 < n_pos) {
      prefetch_l2(a.paging.row(a.k_scale, p1, 4));
      prefetch_l2(a.paging.row(a.v_scale, p1, 4));
    }
    for (int i = 0; i < nr;) {
      const int n = visible(i) - p0 < tile_n ? visible(i) - p0 : tile_n;
      if (n <= 0) {
        ++i;
        continue;
      }
      // The first rows' products prefetch the next rows; the others find them there.
      const NextRows pf = i == 0 ? next : NextRows{nullptr, nullptr};
      if (int_keys) {
        const TileI8 t = {
            static_cast<const int8_t*>(kt), static_cast<const int8_t*>(vt), ks, vs, n, hd, pf};
        if (i + 1 < nr && visible(i + 1) == visible(i)) {
          rows_i8<2>(sc, t, q16, qf, i);  // two heads of one token (GQA) see the same keys
          i += 2;
        } else {
          rows_i8<1>(sc, t, q16, qf, i++);
        }
        continue;
      }
      float* s0 = s;
      float* s1 = s + kTile;
      if (i + 1 < nr && visible(i + 1) == visible(i)) {
        // Two heads of one token (GQA) see the same keys: share the K and V loads.
        scores2<T>(query(i), query(i + 1), kt, pf.k, n, hd, a.scale, ks, s0, s1);
        for (int j = n; j < (n + 15) / 16 * 16; ++j) s0[j] = s1[j] = -INFINITY;
        softmax_tile(s0, n, hd, m + i, l + i, acc + i * hd);
        softmax_tile(s1, n, hd, m + i + 1, l + i + 1, acc + (i + 1) * hd);
        if (kI8) value_scales(vs, n, s0, s1);
        accumulate_v2<T>(s0, s1, vt, n, hd, acc + i * hd, acc + (i + 1) * hd, pf.v);
        i += 2;
      } else {
        scores<T>(query(i), kt, pf.k, n, hd, a.scale, ks, s0);
        softmax_tile(s0, n, hd, m + i, l + i, acc + i * hd);
        if (kI8) value_scales(vs, n, s0, nullptr);
        accumulate_v<T>(s0, vt, n, hd, acc + i * hd);
        ++i;
      }
    }
  }
  for (int i = 0; i < nr; ++i) {
    if (int_keys) unpermute_values(acc + i * hd, hd);
    store_block_row(a, r0 + i, result_row(a, r0 + i), m[i], l[i], acc + i * hd, 1);
  }
}

template <DType T>
void attention_avx512(const AttentionArgs& a) {
  const int hd = a.head_dim;
  if (hd % 16 != 0 || hd > 512) {
    attention_rows_ref(a, T);
    return;
  }
  const AttnScratch sc(a.scratch, hd);
  static_assert(kRows == 16, "a block is one or two vectors of rows");
  const int n_rows = a.n_tok * a.group;
  // A block's widening prefetches the rows after its tile (next_rows) as a decode row's reading
  // does.
  auto tile = [&](int p0, int tile_n, int n_pos, const float** kt, const float** vt) {
    const NextRows next = next_rows(a, p0 + tile_n, n_pos, hd * kKVElemBytes<T>);
    kv_tile<T>(a, sc, p0, tile_n, widen_tile<T>, widen_tile_i8, kt, vt, next);
  };
  for (int r0 = 0; r0 < n_rows; r0 += kRows) {
    const int nr = n_rows - r0 < kRows ? n_rows - r0 : kRows;
    auto q_row = [&](int i) { return query_row(a, r0 + i); };
    auto visible = [&](int i) { return visible_end(a, r0 + i); };
    auto out_row = [&](int i) { return result_row(a, r0 + i); };
    if (nr == kRows && hd == kHdT) {
      if (n_rows - r0 >= 2 * kRows) {
        attend_rows<2, T == DType::F32>(a, sc, q_row, visible, tile, out_row, r0);
        r0 += kRows;  // the loop adds the other kRows
      } else {
        attend_rows<1, T == DType::F32>(a, sc, q_row, visible, tile, out_row, r0);
      }
      continue;
    }
    attend_each_row<T>(a, sc, r0, nr);
  }
}

}  // namespace

void fill_attention_avx512(KernelTable& k) {
  k.attention[type_slot(DType::F32)] = attention_avx512<DType::F32>;
  k.attention[type_slot(DType::F16)] = attention_avx512<DType::F16>;
  k.attention[type_slot(DType::BF16)] = attention_avx512<DType::BF16>;
  k.attention[type_slot(DType::I8)] = attention_avx512<DType::I8>;
}

}  // namespace hearth::cpu
