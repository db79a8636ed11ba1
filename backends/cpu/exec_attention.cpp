// Attention steps over the rows of one or many sequences: per-head q/k RmsNorm and RoPE, storing k
// and v in each sequence's KV blocks, and causal GQA through the ISA's attention kernel over the
// sequence's own blocks. When the KV heads divide evenly among the threads (and always for one
// decoding sequence) each thread owns whole KV heads from start to finish, with no barrier; short
// sequences (batched decode) are (sequence, KV head) items with no barrier either; otherwise the
// preparation is split over (row, head), then a barrier, then (sequence, KV head, token block)
// items are handed out dynamically. Decode of one sequence with fewer KV heads than threads splits
// a long context over positions instead (attend_split).
#include <algorithm>
#include <cmath>

#include "backends/cpu/compiled.h"
#include "backends/cpu/ops.h"
#include "backends/cpu/row_claims.h"

namespace hearth::cpu {

namespace {

constexpr int kTokensPerItem = 32;
// Decode splits a KV head's positions over several threads only when each part gets at least
// this many, since the split costs two more barriers and a merge.
constexpr int kMinPositionsPerPart = 256;

struct Heads {
  const StepCtx& c;
  const AttentionStep& s;
  const CpuKVStorage& kv;
  float* q;
  float* k;
  const float* v;
  float* out;
  int hd, nh, nkv, group, bs;
  size_t esz;

  Heads(const StepCtx& ctx, const AttentionStep& st)
      : c(ctx),
        s(st),
        kv(*ctx.kv),
        q(ctx.ptr(st.q)),
        k(ctx.ptr(st.k)),
        v(ctx.ptr(st.v)),
        out(ctx.ptr(st.out)),
        hd(st.p.head_dim),
        nh(st.p.n_heads),
        nkv(st.p.n_kv_heads),
        group(st.p.n_heads / st.p.n_kv_heads),
        bs(ctx.kv->block_size),
        esz(dtype_size(ctx.kv->dtype)) {}

  void norm_rope(float* x, int n_heads, int t, int h, int norm_w, bool rope) const {
    float* head = x + (int64_t(t) * n_heads + h) * hd;
    if (norm_w >= 0) c.kt.rms_norm(head, c.cg.norm_w[size_t(norm_w)], hd, s.eps, head);
    if (rope) {
      const int64_t p = int64_t(t) * n_heads + h;
      rope_heads(x, n_heads, hd, c.cg.rope_cos.f(), c.cg.rope_sin.f(), p, p + 1);
    }
  }

  // KV head g of step row t (of sequence sq): normalise and rotate k, then store k and v at the
  // row's position in the sequence's block.
  void prepare_kv(const SeqRows& sq, int t, int g) const {
    norm_rope(k, nkv, t, g, s.k_norm, s.rope_k);
    const int pos = sq.pos0 + (t - sq.row0);
    const int blk = sq.blocks[pos / bs], at = pos % bs;
    const size_t off = size_t(at) * size_t(hd) * esz;
    const int64_t src = (int64_t(t) * nkv + g) * hd;
    const int layer = s.p.layer;
    const bool i8 = kv.dtype == DType::I8;
    store_kv_row(c.kt, kv.dtype, k + src, k_factor(), hd, kv.k(blk, layer, g) + off,
                 i8 ? kv.k_scale(blk, layer, g) + at : nullptr);
    store_kv_row(c.kt, kv.dtype, v + src, nullptr, hd, kv.v(blk, layer, g) + off,
                 i8 ? kv.v_scale(blk, layer, g) + at : nullptr);
  }

  const float* k_factor() const {
    return s.k_norm >= 0 ? c.cg.k_factor[size_t(s.k_norm)] : nullptr;
  }

  // The cache of KV head g (block 0's rows, and the sequence's blocks) in a kernel's arguments.
  void set_cache(AttentionArgs& a, const SeqRows& sq, int g) const {
    a.k = kv.k(0, s.p.layer, g);
    a.v = kv.v(0, s.p.layer, g);
    if (kv.dtype == DType::I8) {
      a.k_scale = kv.k_scale(0, s.p.layer, g);
      a.v_scale = kv.v_scale(0, s.p.layer, g);
      a.k_factor = k_factor();
    }
    a.paging = kv.paging(sq);
  }

  void prepare_q(int t, int h) const { norm_rope(q, nh, t, h, s.q_norm, s.rope_q); }

  // Both for every row of sequence sq and KV head g.
  void prepare(const SeqRows& sq, int g) const {
    for (int t = sq.row0; t < sq.row0 + sq.n_rows; ++t) {
      prepare_kv(sq, t, g);
      for (int j = 0; j < group; ++j) prepare_q(t, g * group + j);
    }
  }

  // The first rows of KV head g of sequence sq, where a decode call prefetches them
  // (AttentionArgs::next_k, next_v).
  void set_next(AttentionArgs& a, const SeqRows& sq, int g) const {
    const KVPaging pg = kv.paging(sq);
    const int64_t row = int64_t(hd) * int64_t(esz);
    a.next_k = pg.row(kv.k(0, s.p.layer, g), 0, row);
    a.next_v = pg.row(kv.v(0, s.p.layer, g), 0, row);
  }

  // Rows [t0, t1) of sequence sq (counted from its first row) for the query heads sharing KV head
  // g; next: the (sequence, KV head) this thread attends next, or none.
  void attend(const SeqRows& sq, int g, int t0, int t1, const SeqRows* next_seq = nullptr,
              int next = -1) const {
    const int64_t row = sq.row0 + t0;
    AttentionArgs a;
    a.q = q + (row * nh + int64_t(g) * group) * hd;
    a.q_stride = int64_t(nh) * hd;
    a.out = out + (row * nh + int64_t(g) * group) * hd;
    a.out_stride = int64_t(nh) * hd;
    a.n_tok = t1 - t0;
    a.group = group;
    a.pos0 = sq.pos0 + t0;
    set_cache(a, sq, g);
    a.head_dim = hd;
    a.scale = 1.f / std::sqrt(float(hd));
    a.scratch = c.scratch() + c.cg.off_attn;
    if (next_seq) set_next(a, *next_seq, next);
    c.kt.attention[type_slot(kv.dtype)](a);
  }

  // The one row of a decoding sequence sq for the query heads of KV head g over positions
  // [p0, p1) only, unnormalised, into part (group rows of head_dim) and ml (group pairs {max,
  // sum}).
  void attend_part(const SeqRows& sq, int g, int p0, int p1, float* part, float* ml) const {
    AttentionArgs a;
    a.q = q + (int64_t(sq.row0) * nh + int64_t(g) * group) * hd;
    a.q_stride = int64_t(nh) * hd;
    a.out = part;
    a.out_stride = int64_t(group) * hd;
    a.n_tok = 1;
    a.group = group;
    a.pos0 = sq.pos0;
    set_cache(a, sq, g);
    a.head_dim = hd;
    a.scale = 1.f / std::sqrt(float(hd));
    a.scratch = c.scratch() + c.cg.off_attn;
    a.kv_begin = p0;
    a.kv_end = p1;
    a.ml = ml;
    c.kt.attention[type_slot(kv.dtype)](a);
  }
};

// Decode of one sequence with fewer KV heads than threads and a long context: every thread takes a
// range of one head's positions, then the ranges of each query head are merged by their softmax
// statistics.
void attend_split(const StepCtx& c, const Heads& h, const SeqRows& sq, int parts) {
  int64_t b, e;
  ThreadPool::split(h.nkv, c.tid, c.nth, 1, &b, &e);
  for (int g = int(b); g < int(e); ++g) h.prepare(sq, g);
  c.barrier.wait();
  const int n_pos = sq.pos0 + 1;
  const int64_t stride = c.cg.attn_part_floats;  // per item: group rows, then group {m, l}
  ThreadPool::split(int64_t(h.nkv) * parts, c.tid, c.nth, 1, &b, &e);
  for (int64_t it = b; it < e; ++it) {
    const int g = int(it / parts), p = int(it % parts);
    float* part = c.cg.attn_parts.f() + it * stride;
    h.attend_part(sq, g, int(int64_t(n_pos) * p / parts), int(int64_t(n_pos) * (p + 1) / parts),
                  part, part + int64_t(h.group) * h.hd);
  }
  c.barrier.wait();
  ThreadPool::split(h.nh, c.tid, c.nth, 1, &b, &e);
  for (int qh = int(b); qh < int(e); ++qh) {
    const int g = qh / h.group, j = qh % h.group;
    auto item = [&](int p) { return c.cg.attn_parts.f() + (int64_t(g) * parts + p) * stride; };
    auto ml = [&](int p) { return item(p) + int64_t(h.group) * h.hd + 2 * j; };
    float m = -INFINITY;
    for (int p = 0; p < parts; ++p) m = std::max(m, ml(p)[0]);
    float* o = h.out + (int64_t(sq.row0) * h.nh + qh) * h.hd;
    std::fill(o, o + h.hd, 0.f);
    float l = 0.f;
    for (int p = 0; p < parts; ++p) {
      const float w = ml(p)[1] > 0.f ? std::exp(ml(p)[0] - m) : 0.f;
      l += w * ml(p)[1];
      const float* acc = item(p) + int64_t(j) * h.hd;
      for (int d = 0; d < h.hd; ++d) o[d] += w * acc[d];
    }
    for (int d = 0; d < h.hd; ++d) o[d] /= l;
  }
}

// Long steps: the rows' q and k are prepared over (row, head) items, then, behind a barrier,
// (sequence, KV head, token block) items are handed out dynamically, each sequence's latest
// blocks first: later tokens see more of the cache, so the tail of the queue is cheap. next: the
// step's counter (CpuCompiled::claims), zero before the step.
void attend_items(const StepCtx& c, const Heads& h, std::atomic<int64_t>& next) {
  const int T = c.in.n_tokens, heads = h.nh + h.nkv;
  int64_t b, e;
  ThreadPool::split(int64_t(T) * heads, c.tid, c.nth, 1, &b, &e);
  int s = 0;
  for (int64_t i = b; i < e; ++i) {
    const int t = int(i / heads), j = int(i % heads);
    while (t >= c.in.seqs[s].row0 + c.in.seqs[s].n_rows) ++s;
    if (j < h.nh)
      h.prepare_q(t, j);
    else
      h.prepare_kv(c.in.seqs[s], t, j - h.nh);
  }
  c.barrier.wait();
  auto blocks = [](const SeqRows& sq) { return (sq.n_rows + kTokensPerItem - 1) / kTokensPerItem; };
  int items = 0;
  for (int q = 0; q < c.in.n_seqs; ++q) items += h.nkv * blocks(c.in.seqs[q]);
  for (int it; (it = int(next.fetch_add(1, std::memory_order_relaxed))) < items;) {
    int q = 0, first = 0;
    while (it >= first + h.nkv * blocks(c.in.seqs[q])) first += h.nkv * blocks(c.in.seqs[q++]);
    const SeqRows& sq = c.in.seqs[q];
    const int local = it - first, nb = blocks(sq);
    const int blk = nb - 1 - local / h.nkv, g = local % h.nkv;
    h.attend(sq, g, blk * kTokensPerItem, std::min(sq.n_rows, (blk + 1) * kTokensPerItem));
  }
}

}  // namespace

void run_attention_step(const StepCtx& c, const AttentionStep& s, std::atomic<int64_t>& claim) {
  const Heads h(c, s);
  const StepInputs& in = c.in;
  int max_rows = 0;
  for (int q = 0; q < in.n_seqs; ++q) max_rows = std::max(max_rows, in.seqs[q].n_rows);
  int64_t b, e;
  if (in.n_seqs == 1 && max_rows == 1 && h.nkv < c.nth) {
    const int parts = std::min(c.nth / h.nkv, (in.seqs[0].pos0 + 1) / kMinPositionsPerPart);
    if (parts > 1) return attend_split(c, h, in.seqs[0], parts);
  }
  if (h.nkv % c.nth == 0 || (in.n_seqs == 1 && max_rows == 1)) {
    // Each thread owns whole KV heads of every sequence, from preparation to attention, with no
    // barrier. Shares stay even here: claimed a head or two at a time (RowClaims), the last head
    // kept one thread working alone, and a 512-token prefill ran ~4% slower on two threads.
    ThreadPool::split(h.nkv, c.tid, c.nth, 1, &b, &e);
    for (int q = 0; q < in.n_seqs; ++q) {
      const SeqRows& sq = in.seqs[q];
      for (int g = int(b); g < int(e); ++g) {
        h.prepare(sq, g);
        const bool next = sq.n_rows == 1 && g + 1 < int(e);
        h.attend(sq, g, 0, sq.n_rows, next ? &sq : nullptr, g + 1);
      }
    }
    return;
  }
  if (max_rows <= kTokensPerItem) {
    // Short sequences (batched decode): (sequence, KV head) items, each prepared and attended by
    // one thread, with no barrier, claimed as the threads get to them.
    for (RowClaims items(claim, int64_t(in.n_seqs) * h.nkv, 1, 1, c.nth); items.next(&b, &e);)
      for (int64_t it = b; it < e; ++it) {
        const SeqRows& sq = in.seqs[it / h.nkv];
        const int g = int(it % h.nkv);
        h.prepare(sq, g);
        const bool next = sq.n_rows == 1 && it + 1 < e;
        h.attend(sq, g, 0, sq.n_rows, next ? &in.seqs[(it + 1) / h.nkv] : nullptr,
                 int((it + 1) % h.nkv));
      }
    return;
  }
  attend_items(c, h, claim);
}

}  // namespace hearth::cpu
