// Plain, readable reference implementations of every op the graph has. Each takes the slice of
// work [begin, end) that one thread owns; the backend splits the work and places barriers.
// Activations are f32 row-major; norm weights arrive already widened to f32.
#pragma once
#include <cstdint>
#include <vector>

#include "backends/cpu/kernels.h"
#include "core/tensor.h"

namespace hearth::cpu {

// out[t] = table[tokens[t]] widened to f32, for t in [t0, t1). Token ids were checked by the
// caller. With `packed` (a tied LM head the backend keeps a copy of: BF16 packed by pack_rows in
// kPackBf16, or Q4/Q8 as panels where `panel`: q4_panel.h, q8_panel.h) the rows' codes (and a
// panel's scales) are read from there instead of table.data.
void embed_rows(const Tensor& table, const void* packed, bool panel, const int32_t* tokens,
                float* out, int64_t t0, int64_t t1);
// The same from a BF16 table kept coded (a tied LM head's copy: bf16_coded.h), each token's
// 16-row group decoded by `decode` with its exceptions.
void embed_coded_rows(const Tensor& table, const CodedBf16& coded, DecodeCodedFn decode,
                      const int32_t* tokens, float* out, int64_t t0, int64_t t1);

// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, for rows [r0, r1) of width n.
void rms_norm_rows(const float* x, const float* w, int64_t n, float eps, float* out, int64_t r0,
                   int64_t r1);

// The attention kernels' contract (kernels.h AttentionArgs) one row at a time with attend_range:
// the scalar kernel, and the SIMD kernels' path for head sizes they do not vectorise.
struct AttentionArgs;
void attention_rows_ref(const AttentionArgs& a, DType kv_type);

// Rotate-half RoPE on head vectors: row r of x holds n_heads vectors of head_dim; `rows` below
// index (token, head) pairs as token * n_heads + head. cos/sin are [n_tokens, head_dim / 2].
void rope_heads(float* x, int n_heads, int head_dim, const float* cos, const float* sin, int64_t p0,
                int64_t p1);

// One KV head's cache rows [position][head_dim] as the kernels read them: plain F32/F16/BF16
// values, or I8 codes where element d of position p is code * row_scale[p] * col_factor[d]
// (col_factor null: all ones). See quantize_kv_row.
struct KVRows {
  const void* data = nullptr;
  DType type = DType::F32;
  const float* row_scale = nullptr;
  const float* col_factor = nullptr;
  KVPaging paging;  // data and row_scale are block 0's rows of a paged cache
  float at(int64_t p, int d, int head_dim) const;
};

// Softmax attention of one query head over positions [0, n_pos) of one KV head; the result goes
// to out[head_dim].
void attend_one(const float* q, const KVRows& k, const KVRows& v, int n_pos, int head_dim,
                float scale, float* out);
// The same over positions [p_begin, p_end) only. With ml set, out is left unnormalised (the sum of
// exp(s - m) v) and ml gets {m, l}: the maximum score and the sum of exp(s - m), so that partial
// ranges can be merged; an empty range gives {-inf, 0} and zeros.
void attend_range(const float* q, const KVRows& k, const KVRows& v, int p_begin, int p_end,
                  int head_dim, float scale, float* out, float* ml);

void silu_mul(const float* a, const float* b, float* out, int64_t i0, int64_t i1);
void add(const float* a, const float* b, float* out, int64_t i0, int64_t i1);

// One row of an I8 KV cache: y = x / factor (factor null: ones), *scale = max|y| / 127 and
// codes[d] = round(y[d] / *scale), so x[d] ~ codes[d] * *scale * factor[d]. A per-position scale
// follows each token's magnitude; the per-channel factor (fixed per layer: for keys, the k_norm
// gains, which make some channels outliers in every token) stops those channels from taking the
// whole int8 range from the others.
void quantize_kv_row(const float* x, const float* factor, int64_t n, int8_t* codes, float* scale);
// A token's keys or values of one KV head (n f32 values) into its row of a cache of type t, by the
// table's kernels: copied (F32), rounded (F16, BF16), or for I8 as quantize_kv_row (factor and
// scale used only there).
void store_kv_row(const KernelTable& kt, DType t, const float* x, const float* factor, int64_t n,
                  void* row, float* scale);

// A query row for integer dot products with an I8 cache's key codes (the AVX-512 decode rows):
// q[d] = round(x[d] * (32767 / max|x|)), to nearest even, so x[d] ~ q[d] * the returned max|x| /
// 32767 (0 for a zero row; not finite for a row that is not). 16 bits hold the query to 2^-16 of
// its largest element, where the codes it meets hold the keys to 2^-8 of theirs.
float round_query16(const float* x, int64_t n, int16_t* q);

// Per-channel factors for a layer's I8 keys from its k_norm gains w[head_dim]: rotate-half RoPE
// mixes channels d and d + head_dim/2, so both get max(|w[d]|, |w[d + head_dim/2]|).
std::vector<float> kv_key_factors(const float* w, int head_dim);

}  // namespace hearth::cpu
