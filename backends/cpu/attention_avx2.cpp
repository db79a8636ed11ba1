// AVX2 attention: q/out rows f32 [n_tok][group][head_dim] (strided per token), one KV head's cache
// rows [position][head_dim] in F32/F16/BF16/I8; key tiles of 64 positions shared by up to 16 query
// rows, online softmax per row, f32 throughout (16-bit and I8 caches are widened tile by tile, I8
// codes times their position's scale and, for keys, the channel factors). Whole blocks of 16 rows
// (prefill) are transposed into lanes: queries, scores and outputs [element][16 rows].
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/attention_scratch.h"
#include "backends/cpu/kernels.h"
#include "backends/cpu/ops.h"
#include "backends/cpu/simd_avx2.h"

namespace hearth::cpu {

namespace {

constexpr int kTile = int(kAttnKeyTile);
constexpr int kRows = int(kAttnRowsPerBlock);
static_assert(kTile % 8 == 0, "key tiles are whole vectors");

// Eight vectors in, one out: lane j is the sum of v[j]'s lanes.
inline __m256 reduce8(const __m256* v) {
  __m256 s[4], w[2];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)
    s[i] = _mm256_add_ps(_mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                         _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]));
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {
    const __m256d a = _mm256_castps_pd(s[2 * i]), b = _mm256_castps_pd(s[2 * i + 1]);
    w[i] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(a, b)),
                         _mm256_castpd_ps(_mm256_unpackhi_pd(a, b)));
  }
  return _mm256_add_ps(_mm256_permute2f128_ps(w[0], w[1], 0x20),
                       _mm256_permute2f128_ps(w[0], w[1], 0x31));
}

template <DType T>
void widen_tile(const void* src, int p0, int n, int hd, float* dst, const void* pf) {
  const uint16_t* s = static_cast<const uint16_t*>(src) + int64_t(p0) * hd;
  for (int64_t i = 0; i < int64_t(n) * hd; i += 8) {
    if (pf && i % 32 == 0) prefetch_l2(static_cast<const uint16_t*>(pf) + int64_t(p0) * hd + i);
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    __m256 f;
    if constexpr (T == DType::F16)
      f = _mm256_cvtph_ps(h);
    else
      f = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    _mm256_storeu_ps(dst + i, f);
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
      const __m128i c = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + int64_t(j) * hd + d));
      __m256 f =
          _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c)), _mm256_set1_ps(scale[p0 + j]));
      if (factor) f = _mm256_mul_ps(f, _mm256_loadu_ps(factor + d));
      _mm256_storeu_ps(dst + int64_t(j) * hd + d, f);
    }
}

// Scaled scores of one query row against n keys into s (whole vectors; lanes past n are -inf);
// the same rows of pf (or null) are prefetched meanwhile.
inline void scores(const float* q, const float* kt, const void* pf, int n, int hd, float scale,
                   float* s) {
  for (int j0 = 0; j0 < n; j0 += 8) {
    __m256 acc[8];
    const float* rows[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      acc[j] = _mm256_setzero_ps();
      rows[j] = kt + int64_t(j0 + j < n ? j0 + j : n - 1) * hd;
    }
    for (int c = 0; c < hd; c += 8) {
      const __m256 qc = _mm256_loadu_ps(q + c);
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        if (pf && c % 16 == 0) prefetch_l2(static_cast<const float*>(pf) + (rows[j] - kt) + c);
        acc[j] = _mm256_fmadd_ps(qc, _mm256_loadu_ps(rows[j] + c), acc[j]);
      }
    }
    _mm256_storeu_ps(s + j0, _mm256_mul_ps(reduce8(acc), _mm256_set1_ps(scale)));
    for (int j = n - j0; j < 8; ++j) s[j0 + j] = -INFINITY;
  }
}

// o += sum_j e[j] v_j over n value rows; the same rows of pf (or null) are prefetched meanwhile.
inline void accumulate_v(const float* e, const float* vt, const void* pf, int n, int hd, float* o) {
  int d0 = 0;
  for (; d0 + 64 <= hd; d0 += 64) {
    __m256 ov[8];
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) ov[c] = _mm256_loadu_ps(o + d0 + c * 8);
    for (int j = 0; j < n; ++j) {
      const __m256 ej = _mm256_set1_ps(e[j]);
      const int64_t vr = int64_t(j) * hd + d0;
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        if (pf && c % 2 == 0) prefetch_l2(static_cast<const float*>(pf) + vr + c * 8);
        ov[c] = _mm256_fmadd_ps(ej, _mm256_loadu_ps(vt + vr + c * 8), ov[c]);
      }
    }
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) _mm256_storeu_ps(o + d0 + c * 8, ov[c]);
  }
  for (; d0 < hd; d0 += 8) {
    __m256 ov = _mm256_loadu_ps(o + d0);
    for (int j = 0; j < n; ++j)
      ov = _mm256_fmadd_ps(_mm256_set1_ps(e[j]), _mm256_loadu_ps(vt + int64_t(j) * hd + d0), ov);
    _mm256_storeu_ps(o + d0, ov);
  }
}

// Whole blocks of 16 query rows (prefill), transposed into two vectors of 8 rows: scores come
// out as vectors of rows per key, the online softmax runs on the rows in lanes, and both products
// are FMAs of a broadcast key or value element with the two vectors of rows, with no horizontal
// sums (as in attention_avx512.cpp; the per-row path ran at ~43% of the FMA peak on Zen 5). A
// pass covers kPassT keys or output channels: 2 x 6 accumulators, the two row vectors and a
// broadcast fit the 16 registers. The head dimension is fixed at 128 (every Qwen3 size).
constexpr int kHdT = 128, kPassT = 6;

// acc[j][v] = keys kb[j] . rows of vector v, for kPassT keys.
inline void scores_pass(const float* qt, const float* kb, __m256 (&acc)[kPassT][2]) {
#pragma GCC unroll 6
  for (int j = 0; j < kPassT; ++j) acc[j][0] = acc[j][1] = _mm256_setzero_ps();
  for (int d = 0; d < kHdT; ++d) {
    const __m256 q0 = _mm256_loadu_ps(qt + 16 * d), q1 = _mm256_loadu_ps(qt + 16 * d + 8);
#pragma GCC unroll 6
    for (int j = 0; j < kPassT; ++j) {
      const __m256 k = _mm256_broadcast_ss(kb + j * kHdT + d);
      acc[j][0] = _mm256_fmadd_ps(k, q0, acc[j][0]);
      acc[j][1] = _mm256_fmadd_ps(k, q1, acc[j][1]);
    }
  }
}

// ot[d] += sum_j e[j] v_j[d] over n value rows, kPassT output channels at a time.
inline void accumulate_rows(const float* st, const float* vt, int n, float* ot) {
  for (int d0 = 0; d0 < kHdT; d0 += kPassT) {
    const int w = kHdT - d0 < kPassT ? kHdT - d0 : kPassT;
    if (w < kPassT) {  // the last channels: one at a time
      for (int c = d0; c < kHdT; ++c) {
        __m256 a0 = _mm256_loadu_ps(ot + 16 * c), a1 = _mm256_loadu_ps(ot + 16 * c + 8);
        for (int j = 0; j < n; ++j) {
          const __m256 x = _mm256_broadcast_ss(vt + int64_t(j) * kHdT + c);
          a0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(st + 16 * j), a0);
          a1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(st + 16 * j + 8), a1);
        }
        _mm256_storeu_ps(ot + 16 * c, a0);
        _mm256_storeu_ps(ot + 16 * c + 8, a1);
      }
      break;
    }
    __m256 acc[kPassT][2];
#pragma GCC unroll 6
    for (int c = 0; c < kPassT; ++c) {
      acc[c][0] = _mm256_loadu_ps(ot + 16 * (d0 + c));
      acc[c][1] = _mm256_loadu_ps(ot + 16 * (d0 + c) + 8);
    }
    const float* vr = vt + d0;
    for (int j = 0; j < n; ++j, vr += kHdT) {
      const __m256 e0 = _mm256_loadu_ps(st + 16 * j), e1 = _mm256_loadu_ps(st + 16 * j + 8);
#pragma GCC unroll 6
      for (int c = 0; c < kPassT; ++c) {
        const __m256 x = _mm256_broadcast_ss(vr + c);
        acc[c][0] = _mm256_fmadd_ps(x, e0, acc[c][0]);
        acc[c][1] = _mm256_fmadd_ps(x, e1, acc[c][1]);
      }
    }
#pragma GCC unroll 6
    for (int c = 0; c < kPassT; ++c) {
      _mm256_storeu_ps(ot + 16 * (d0 + c), acc[c][0]);
      _mm256_storeu_ps(ot + 16 * (d0 + c) + 8, acc[c][1]);
    }
  }
}

// Rows q(0..15) seeing positions [kv_begin, end(i)); tile(p0, n, n_pos, &kt, &vt) yields f32 key
// and value rows for positions [p0, p0 + n), read in place when kDirect (an f32 cache). Row i's
// result goes to out(i), as row r0 + i of the kernel's (store_block_row).
template <bool kDirect, class Q, class End, class Tile, class Out>
void attend_rows(const AttentionArgs& a, const AttnScratch& b, Q q, End end, Tile tile, Out out,
                 int r0) {
  const __m256 ninf = _mm256_set1_ps(-INFINITY), zero = _mm256_setzero_ps();
  alignas(32) int32_t ends[16];
  for (int i = 0; i < 16; ++i) {
    const float* qi = q(i);
    for (int d = 0; d < kHdT; ++d) b.qt[16 * d + i] = qi[d];
    ends[i] = end(i);
  }
  const __m256i vis[2] = {_mm256_load_si256(reinterpret_cast<const __m256i*>(ends)),
                          _mm256_load_si256(reinterpret_cast<const __m256i*>(ends + 8))};
  __m256 m[2] = {ninf, ninf}, l[2] = {zero, zero};
  std::memset(b.acc, 0, sizeof(float) * 16 * kHdT);
  const int n_pos = ends[15];  // rows are token-major: the last sees most
  for (int p0 = a.kv_begin, tile_n; p0 < n_pos; p0 += tile_n) {
    tile_n = std::min({n_pos - p0, kTile, a.paging.run(p0)});
    const float* kt;
    const float* vt;
    tile(p0, tile_n, n_pos, &kt, &vt);
    __m256 tmax[2] = {ninf, ninf};
    for (int j0 = 0; j0 < tile_n; j0 += kPassT) {
      const int nk = tile_n - j0 < kPassT ? tile_n - j0 : kPassT;
      const float* kb = kt + int64_t(j0) * kHdT;
      if (nk < kPassT && (kDirect || j0 + kPassT > kTile)) {
        std::memcpy(b.pad, kb, sizeof(float) * size_t(nk) * kHdT);
        kb = b.pad;
      }
      __m256 sv[kPassT][2];
      scores_pass(b.qt, kb, sv);
      for (int j = 0; j < nk; ++j)
        for (int v = 0; v < 2; ++v) {
          const __m256 seen =
              _mm256_castsi256_ps(_mm256_cmpgt_epi32(vis[v], _mm256_set1_epi32(p0 + j0 + j)));
          const __m256 s =
              _mm256_blendv_ps(ninf, _mm256_mul_ps(sv[j][v], _mm256_set1_ps(a.scale)), seen);
          tmax[v] = _mm256_max_ps(tmax[v], s);
          _mm256_storeu_ps(b.s + 16 * (j0 + j) + 8 * v, s);
        }
    }
    // Online softmax in lanes. A row that has seen nothing yet keeps m = -inf; exp is taken
    // against 0 there so that -inf - -inf never makes a NaN.
    __m256 base[2];
    for (int v = 0; v < 2; ++v) {
      const __m256 m_new = _mm256_max_ps(m[v], tmax[v]);
      base[v] = _mm256_blendv_ps(m_new, zero, _mm256_cmp_ps(m_new, ninf, _CMP_EQ_OQ));
      if (_mm256_movemask_ps(_mm256_cmp_ps(m_new, m[v], _CMP_GT_OQ))) {
        const __m256 c = exp256(_mm256_sub_ps(m[v], base[v]));
        l[v] = _mm256_mul_ps(l[v], c);
        for (int d = 0; d < kHdT; ++d) {
          float* o = b.acc + 16 * d + 8 * v;
          _mm256_storeu_ps(o, _mm256_mul_ps(_mm256_loadu_ps(o), c));
        }
      }
      m[v] = m_new;
    }
    for (int j = 0; j < tile_n; ++j)
      for (int v = 0; v < 2; ++v) {
        float* sj = b.s + 16 * j + 8 * v;
        const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(sj), base[v]));
        l[v] = _mm256_add_ps(l[v], e);
        _mm256_storeu_ps(sj, e);
      }
    accumulate_rows(b.s, vt, tile_n, b.acc);
  }
  alignas(32) float ms[16], ls[16];
  for (int v = 0; v < 2; ++v) {
    _mm256_store_ps(ms + 8 * v, m[v]);
    _mm256_store_ps(ls + 8 * v, l[v]);
  }
  for (int i = 0; i < 16; ++i) store_block_row(a, r0 + i, out(i), ms[i], ls[i], b.acc + i, 16);
}

// Rows [r0, r0 + nr) one by one (decode, and blocks short of kRows rows).
template <DType T>
void attend_each_row(const AttentionArgs& a, const AttnScratch& sc, int r0, int nr) {
  auto visible = [&](int i) { return visible_end(a, r0 + i); };
  const int hd = a.head_dim;
  float *acc = sc.acc, *m = sc.m, *l = sc.l, *s = sc.s;
  sc.reset_rows(nr, hd);
  const int n_pos = visible(nr - 1);
  for (int p0 = a.kv_begin, tile_n; p0 < n_pos; p0 += tile_n) {
    tile_n = std::min({n_pos - p0, kTile, a.paging.run(p0)});
    // The rows after this tile's are prefetched meanwhile (next_rows): by the widening of a
    // 16-bit or I8 tile, by the first row's products over an f32 one.
    const int64_t row_bytes = hd * kKVElemBytes<T>;
    const NextRows next = next_rows(a, p0 + tile_n, n_pos, row_bytes);
    const float* kt;
    const float* vt;
    kv_tile<T>(a, sc, p0, tile_n, widen_tile<T>, widen_tile_i8, &kt, &vt, next);
    for (int i = 0; i < nr; ++i) {
      const int n = visible(i) - p0 < tile_n ? visible(i) - p0 : tile_n;
      if (n <= 0) continue;
      const int r = r0 + i;
      const bool pf = T == DType::F32 && i == 0;
      scores(query_row(a, r), kt, pf ? next.k : nullptr, n, hd, a.scale, s);
      __m256 mx = _mm256_set1_ps(-INFINITY);
      for (int j = 0; j < n; j += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + j));
      const float tile_max = hmax256(mx);
      const float m_new = tile_max > m[i] ? tile_max : m[i];
      float* o = acc + i * hd;
      if (m_new > m[i]) {
        const __m256 c = exp256(_mm256_set1_ps(m[i] - m_new));
        l[i] *= _mm256_cvtss_f32(c);
        for (int d = 0; d < hd; d += 8)
          _mm256_storeu_ps(o + d, _mm256_mul_ps(_mm256_loadu_ps(o + d), c));
        m[i] = m_new;
      }
      __m256 sum = _mm256_setzero_ps();
      for (int j = 0; j < n; j += 8) {
        const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + j), _mm256_set1_ps(m_new)));
        sum = _mm256_add_ps(sum, e);
        _mm256_storeu_ps(s + j, e);
      }
      l[i] += hsum256(sum);
      accumulate_v(s, vt, pf ? next.v : nullptr, n, hd, o);
    }
  }
  for (int i = 0; i < nr; ++i)
    store_block_row(a, r0 + i, result_row(a, r0 + i), m[i], l[i], acc + i * hd, 1);
}

template <DType T>
void attention_avx2(const AttentionArgs& a) {
  const int hd = a.head_dim;
  if (hd % 8 != 0) {
    attention_rows_ref(a, T);
    return;
  }
  const AttnScratch sc(a.scratch, hd);
  static_assert(kRows == 16, "a block is two vectors of rows");
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
      attend_rows<T == DType::F32>(a, sc, q_row, visible, tile, out_row, r0);
      continue;
    }
    attend_each_row<T>(a, sc, r0, nr);
  }
}

}  // namespace

void fill_attention_avx2(KernelTable& k) {
  k.attention[type_slot(DType::F32)] = attention_avx2<DType::F32>;
  k.attention[type_slot(DType::F16)] = attention_avx2<DType::F16>;
  k.attention[type_slot(DType::BF16)] = attention_avx2<DType::BF16>;
  k.attention[type_slot(DType::I8)] = attention_avx2<DType::I8>;
}

}  // namespace hearth::cpu
