// The attention kernels' scratch (attention_scratch_floats) carved into its parts, and a KV tile
// fetched as f32 rows, for the attention_<isa>.cpp files; include only from those (anonymous
// namespace: each gets its own copy, compiled with its own flags).
#pragma once
#include <cmath>
#include <cstring>

#include "backends/cpu/kernels.h"

namespace hearth::cpu {
namespace {

// Per-row state for up to R = kAttnRowsPerBlock rows, or a transposed block's for up to 2 R.
struct AttnScratch {
  float* acc;    // [2 R][hd] rows' outputs, or a block's [hd][rows], unnormalised
  float* m;      // [2 R]
  float* l;      // [2 R]
  float* s;      // [kAttnKeyTile][2 R]: one or two rows' scores, or a block's [key][rows]
  float* qt;     // [hd][rows], a block's queries
  float* pad;    // [R][hd], a short last key group of an f32 cache, so no load leaves the cache
  float* ktile;  // [kAttnKeyTile][hd], 16-bit and I8 caches only (single rows: I8 queries)
  float* vtile;  // [kAttnKeyTile][hd]

  AttnScratch(float* base, int64_t hd) {
    constexpr int64_t R = kAttnRowsPerBlock, kTile = kAttnKeyTile;
    acc = base;
    m = acc + 2 * R * hd;
    l = m + 2 * R;
    s = l + 2 * R;
    qt = s + kTile * 2 * R;
    pad = qt + 2 * R * hd;
    ktile = pad + R * hd;
    vtile = ktile + kTile * hd;
  }
  // Rows [0, nr) before their first tile: nothing seen yet (m = -inf, l = 0, outputs 0).
  void reset_rows(int nr, int64_t hd) const {
    for (int i = 0; i < nr; ++i) {
      m[i] = -INFINITY;
      l[i] = 0.f;
      std::memset(acc + i * hd, 0, size_t(hd) * 4);
    }
  }
};

// Bytes per element of a KV cache of type T.
template <DType T>
constexpr int64_t kKVElemBytes = T == DType::F32  ? 4
                                 : T == DType::I8 ? 1
                                                  : 2;

// The key and value rows a decode row reads after tile [p0, p1): the next tile's or, after the
// last (p1 == n_pos), the next call's first (AttentionArgs::next_k, next_v; null for none).
// Prefetching them while the tile is read keeps several short runs of a paged head in flight,
// which hardware prefetchers do not (decode attention waited on memory). Into L2: L1 prefetches
// took the line-fill buffers the tile's own loads need.
struct NextRows {
  const void* k;
  const void* v;
};
inline NextRows next_rows(const AttentionArgs& a, int p1, int n_pos, int64_t row_bytes) {
  if (p1 >= n_pos) return {a.next_k, a.next_v};
  return {a.paging.row(a.k, p1, row_bytes), a.paging.row(a.v, p1, row_bytes)};
}
inline void prefetch_l2(const void* p) {
  __builtin_prefetch(p, 0, 2);  // x86: prefetcht1; Arm: prfm pldl2keep
}
// For the AVX-512 decode rows of a 16-bit or f32 cache, which read it in place, key by key: there
// prefetcht0 took a position 2-7% less time than prefetcht1 from memory (bench/RESULTS.md).
inline void prefetch_l1(const void* p) {
  __builtin_prefetch(p, 0, 3);  // x86: prefetcht0
}
// pf: rows to prefetch meanwhile, as many bytes as the source (next_rows), or null.
using WidenTileFn = void (*)(const void* src, int p0, int n, int hd, float* dst, const void* pf);
using WidenTileI8Fn = void (*)(const void* src, const float* scale, const float* factor, int p0,
                               int n, int hd, float* dst, const void* pf);

// Key and value rows of positions [p0, p0 + n) (within one block of a paged cache) as f32: in place
// for an f32 cache, else widened into the scratch's tiles by the ISA's widen16 (F16/BF16) or
// widen_i8 (I8 codes times their position's scale and, for keys, the channel factors).
template <DType T>
inline void kv_tile(const AttentionArgs& a, const AttnScratch& sc, int p0, int n,
                    WidenTileFn widen16, WidenTileI8Fn widen_i8, const float** kt, const float** vt,
                    NextRows pf = {}) {
  const int hd = a.head_dim;
  const int64_t row = hd * kKVElemBytes<T>;
  const void* k = a.paging.row(a.k, p0, row);
  const void* v = a.paging.row(a.v, p0, row);
  if constexpr (T == DType::F32) {
    *kt = static_cast<const float*>(k);
    *vt = static_cast<const float*>(v);
    return;
  } else if constexpr (T == DType::I8) {
    widen_i8(k, static_cast<const float*>(a.paging.row(a.k_scale, p0, 4)), a.k_factor, 0, n, hd,
             sc.ktile, pf.k);
    widen_i8(v, static_cast<const float*>(a.paging.row(a.v_scale, p0, 4)), nullptr, 0, n, hd,
             sc.vtile, pf.v);
  } else {
    widen16(k, 0, n, hd, sc.ktile, pf.k);
    widen16(v, 0, n, hd, sc.vtile, pf.v);
  }
  *kt = sc.ktile;
  *vt = sc.vtile;
}

// Query row r of a call: rows are token-major (token r / group, head r % group of the group), so
// the last row sees the most positions. Where its query is, where its result goes, and the end of
// the positions it sees.
inline const float* query_row(const AttentionArgs& a, int r) {
  return a.q + (r / a.group) * a.q_stride + (r % a.group) * a.head_dim;
}
inline float* result_row(const AttentionArgs& a, int r) {
  return a.out + (r / a.group) * a.out_stride + (r % a.group) * a.head_dim;
}
inline int visible_end(const AttentionArgs& a, int r) {
  const int end = a.pos0 + r / a.group + 1;
  return end < a.kv_end ? end : a.kv_end;
}

// Row r's result, its outputs o `stride` floats apart (1 for a row's own accumulator, the block's
// rows for a transposed block): normalised by l into out or, over a range of positions
// (AttentionArgs::ml), left unnormalised with {m, l} beside.
inline void store_block_row(const AttentionArgs& a, int r, float* out, float m, float l,
                            const float* o, int stride) {
  const float f = a.ml ? 1.f : 1.f / l;
  for (int d = 0; d < a.head_dim; ++d) out[d] = o[int64_t(stride) * d] * f;
  if (a.ml) a.ml[2 * r] = m, a.ml[2 * r + 1] = l;
}

}  // namespace
}  // namespace hearth::cpu
