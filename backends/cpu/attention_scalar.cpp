// Reference attention: q/out rows f32 [n_tok][group][head_dim] (strided per token), one KV head's
// cache rows [position][head_dim] in F32, F16, BF16 or I8 (codes with per-position scales and, for
// keys, per-channel factors); one query row at a time with attend_range.
#include "backends/cpu/kernels.h"
#include "backends/cpu/ops.h"

namespace hearth::cpu {

namespace {

template <DType T>
void attention_scalar(const AttentionArgs& a) {
  attention_rows_ref(a, T);
}

}  // namespace

void attention_rows_ref(const AttentionArgs& a, DType kv_type) {
  const KVRows k{a.k, kv_type, a.k_scale, a.k_factor, a.paging},
      v{a.v, kv_type, a.v_scale, nullptr, a.paging};
  for (int t = 0; t < a.n_tok; ++t)
    for (int j = 0; j < a.group; ++j) {
      const int end = a.pos0 + t + 1 < a.kv_end ? a.pos0 + t + 1 : a.kv_end;
      attend_range(a.q + t * a.q_stride + j * a.head_dim, k, v, a.kv_begin, end, a.head_dim,
                   a.scale, a.out + t * a.out_stride + j * a.head_dim,
                   a.ml ? a.ml + 2 * (t * a.group + j) : nullptr);
    }
}

void fill_attention_scalar(KernelTable& k) {
  k.attention[type_slot(DType::F32)] = attention_scalar<DType::F32>;
  k.attention[type_slot(DType::F16)] = attention_scalar<DType::F16>;
  k.attention[type_slot(DType::BF16)] = attention_scalar<DType::BF16>;
  k.attention[type_slot(DType::I8)] = attention_scalar<DType::I8>;
}

}  // namespace hearth::cpu
