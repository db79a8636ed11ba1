// Attention steps: per-head q/k RmsNorm and RoPE, appending k and v to the cache, and causal GQA
// through the ISA's attention kernel. When the KV heads divide evenly among the threads (and
// always for one token) each thread owns whole KV heads from start to finish, with no barrier;
// otherwise the preparation is split over (token, head), then a barrier, then (KV head, token
// block) items are handed out dynamically because later tokens see more of the cache.
#include <algorithm>
#include <cmath>

#include "backends/cpu/compiled.h"
#include "backends/cpu/ops.h"

namespace hearth::cpu {

namespace {

constexpr int kTokensPerItem = 32;

struct Heads {
  const StepCtx& c;
  const AttentionStep& s;
  float* q;
  float* k;
  const float* v;
  float* out;
  int hd, nh, nkv, group;
  size_t esz;

  Heads(const StepCtx& ctx, const AttentionStep& st)
      : c(ctx),
        s(st),
        q(ctx.ptr(st.q)),
        k(ctx.ptr(st.k)),
        v(ctx.ptr(st.v)),
        out(ctx.ptr(st.out)),
        hd(st.p.head_dim),
        nh(st.p.n_heads),
        nkv(st.p.n_kv_heads),
        group(st.p.n_heads / st.p.n_kv_heads),
        esz(dtype_size(ctx.kv->dtype)) {}

  void norm_rope(float* x, int n_heads, int t, int h, int norm_w, bool rope) const {
    float* head = x + (int64_t(t) * n_heads + h) * hd;
    if (norm_w >= 0) c.kt.rms_norm(head, c.cg.norm_w[size_t(norm_w)], hd, s.eps, head);
    if (rope) {
      const int64_t p = int64_t(t) * n_heads + h;
      rope_heads(x, n_heads, hd, c.cg.rope_cos.f(), c.cg.rope_sin.f(), p, p + 1);
    }
  }

  // KV head g of token t: normalise and rotate k, then append k and v at position pos0 + t.
  void prepare_kv(int t, int g) const {
    norm_rope(k, nkv, t, g, s.k_norm, s.rope_k);
    const size_t off = size_t(c.in.pos0 + t) * size_t(hd) * esz;
    const int64_t src = (int64_t(t) * nkv + g) * hd;
    store_as(c.kv->dtype, k + src, c.kv->k(s.p.layer, g) + off, hd);
    store_as(c.kv->dtype, v + src, c.kv->v(s.p.layer, g) + off, hd);
  }

  void prepare_q(int t, int h) const { norm_rope(q, nh, t, h, s.q_norm, s.rope_q); }

  // Tokens [t0, t1) of the query heads sharing KV head g.
  void attend(int g, int t0, int t1) const {
    AttentionArgs a;
    a.q = q + (int64_t(t0) * nh + int64_t(g) * group) * hd;
    a.q_stride = int64_t(nh) * hd;
    a.out = out + (int64_t(t0) * nh + int64_t(g) * group) * hd;
    a.out_stride = int64_t(nh) * hd;
    a.n_tok = t1 - t0;
    a.group = group;
    a.pos0 = c.in.pos0 + t0;
    a.k = c.kv->k(s.p.layer, g);
    a.v = c.kv->v(s.p.layer, g);
    a.head_dim = hd;
    a.scale = 1.f / std::sqrt(float(hd));
    a.scratch = c.scratch() + c.cg.off_attn;
    c.kt.attention[type_slot(c.kv->dtype)](a);
  }
};

}  // namespace

void run_attention_step(const StepCtx& c, const AttentionStep& s) {
  const Heads h(c, s);
  const int T = c.in.n_tokens;
  int64_t b, e;
  if (T == 1 || h.nkv % c.nth == 0) {
    ThreadPool::split(h.nkv, c.tid, c.nth, 1, &b, &e);
    for (int g = int(b); g < int(e); ++g) {
      for (int t = 0; t < T; ++t) {
        h.prepare_kv(t, g);
        for (int j = 0; j < h.group; ++j) h.prepare_q(t, g * h.group + j);
      }
      h.attend(g, 0, T);
    }
    return;
  }
  const int heads = h.nh + h.nkv;
  ThreadPool::split(int64_t(T) * heads, c.tid, c.nth, 1, &b, &e);
  for (int64_t i = b; i < e; ++i) {
    const int t = int(i / heads), j = int(i % heads);
    if (j < h.nh) h.prepare_q(t, j);
    else h.prepare_kv(t, j - h.nh);
  }
  if (c.tid == 0) c.cg.next_item.store(0, std::memory_order_relaxed);
  c.barrier.wait();
  const int blocks = (T + kTokensPerItem - 1) / kTokensPerItem;
  const int items = h.nkv * blocks;
  for (int it; (it = c.cg.next_item.fetch_add(1, std::memory_order_relaxed)) < items;) {
    // Latest blocks first: they are the most expensive, so the tail of the queue is cheap.
    const int blk = blocks - 1 - it / h.nkv, g = it % h.nkv;
    h.attend(g, blk * kTokensPerItem, std::min(T, (blk + 1) * kTokensPerItem));
  }
}

}  // namespace hearth::cpu
