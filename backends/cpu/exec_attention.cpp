// Attention steps: per-head q/k RmsNorm and RoPE, appending k and v to the cache, and causal GQA
// through the ISA's attention kernel. When the KV heads divide evenly among the threads (and
// always for one token) each thread owns whole KV heads from start to finish, with no barrier;
// otherwise the preparation is split over (token, head), then a barrier, then (KV head, token
// block) items are handed out dynamically because later tokens see more of the cache. Decode with
// fewer KV heads than threads splits long contexts over positions instead (attend_split).
#include <algorithm>
#include <cmath>

#include "backends/cpu/compiled.h"
#include "backends/cpu/ops.h"

namespace hearth::cpu {

namespace {

constexpr int kTokensPerItem = 32;
// Decode splits a KV head's positions over several threads only when each part gets at least
// this many, since the split costs two more barriers and a merge.
constexpr int kMinPositionsPerPart = 256;

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
    const int pos = c.in.pos0 + t;
    const size_t off = size_t(pos) * size_t(hd) * esz;
    const int64_t src = (int64_t(t) * nkv + g) * hd;
    if (c.kv->dtype == DType::I8) {
      quantize_kv_row(k + src, k_factor(), hd,
                      reinterpret_cast<int8_t*>(c.kv->k(s.p.layer, g) + off),
                      c.kv->k_scale(s.p.layer, g) + pos);
      quantize_kv_row(v + src, nullptr, hd, reinterpret_cast<int8_t*>(c.kv->v(s.p.layer, g) + off),
                      c.kv->v_scale(s.p.layer, g) + pos);
      return;
    }
    store_as(c.kv->dtype, k + src, c.kv->k(s.p.layer, g) + off, hd);
    store_as(c.kv->dtype, v + src, c.kv->v(s.p.layer, g) + off, hd);
  }

  const float* k_factor() const {
    return s.k_norm >= 0 ? c.cg.k_factor[size_t(s.k_norm)] : nullptr;
  }

  // The cache pointers of KV head g in a kernel's arguments.
  void set_cache(AttentionArgs& a, int g) const {
    a.k = c.kv->k(s.p.layer, g);
    a.v = c.kv->v(s.p.layer, g);
    if (c.kv->dtype == DType::I8) {
      a.k_scale = c.kv->k_scale(s.p.layer, g);
      a.v_scale = c.kv->v_scale(s.p.layer, g);
      a.k_factor = k_factor();
    }
  }

  void prepare_q(int t, int h) const { norm_rope(q, nh, t, h, s.q_norm, s.rope_q); }

  // Tokens [t0, t1) of the query heads sharing KV head g; next: the KV head this thread attends
  // next, or -1 (AttentionArgs::next_k).
  void attend(int g, int t0, int t1, int next = -1) const {
    AttentionArgs a;
    a.q = q + (int64_t(t0) * nh + int64_t(g) * group) * hd;
    a.q_stride = int64_t(nh) * hd;
    a.out = out + (int64_t(t0) * nh + int64_t(g) * group) * hd;
    a.out_stride = int64_t(nh) * hd;
    a.n_tok = t1 - t0;
    a.group = group;
    a.pos0 = c.in.pos0 + t0;
    set_cache(a, g);
    a.head_dim = hd;
    a.scale = 1.f / std::sqrt(float(hd));
    a.scratch = c.scratch() + c.cg.off_attn;
    if (next >= 0) a.next_k = c.kv->k(s.p.layer, next);
    c.kt.attention[type_slot(c.kv->dtype)](a);
  }

  // One token's query heads of KV head g over positions [p0, p1) only, unnormalised, into
  // part (group rows of head_dim) and ml (group pairs {max, sum}).
  void attend_part(int g, int p0, int p1, float* part, float* ml) const {
    AttentionArgs a;
    a.q = q + int64_t(g) * group * hd;
    a.q_stride = int64_t(nh) * hd;
    a.out = part;
    a.out_stride = int64_t(group) * hd;
    a.n_tok = 1;
    a.group = group;
    a.pos0 = c.in.pos0;
    set_cache(a, g);
    a.head_dim = hd;
    a.scale = 1.f / std::sqrt(float(hd));
    a.scratch = c.scratch() + c.cg.off_attn;
    a.kv_begin = p0;
    a.kv_end = p1;
    a.ml = ml;
    c.kt.attention[type_slot(c.kv->dtype)](a);
  }
};

// Decode with fewer KV heads than threads and a long context: every thread takes a range of one
// head's positions, then the ranges of each query head are merged by their softmax statistics.
void attend_split(const StepCtx& c, const Heads& h, int parts) {
  int64_t b, e;
  ThreadPool::split(h.nkv, c.tid, c.nth, 1, &b, &e);
  for (int g = int(b); g < int(e); ++g) {
    h.prepare_kv(0, g);
    for (int j = 0; j < h.group; ++j) h.prepare_q(0, g * h.group + j);
  }
  c.barrier.wait();
  const int n_pos = c.in.pos0 + 1;
  const int64_t stride = c.cg.attn_part_floats;  // per item: group rows, then group {m, l}
  ThreadPool::split(int64_t(h.nkv) * parts, c.tid, c.nth, 1, &b, &e);
  for (int64_t it = b; it < e; ++it) {
    const int g = int(it / parts), p = int(it % parts);
    float* part = c.cg.attn_parts.f() + it * stride;
    h.attend_part(g, int(int64_t(n_pos) * p / parts), int(int64_t(n_pos) * (p + 1) / parts), part,
                  part + int64_t(h.group) * h.hd);
  }
  c.barrier.wait();
  ThreadPool::split(h.nh, c.tid, c.nth, 1, &b, &e);
  for (int qh = int(b); qh < int(e); ++qh) {
    const int g = qh / h.group, j = qh % h.group;
    auto item = [&](int p) { return c.cg.attn_parts.f() + (int64_t(g) * parts + p) * stride; };
    auto ml = [&](int p) { return item(p) + int64_t(h.group) * h.hd + 2 * j; };
    float m = -INFINITY;
    for (int p = 0; p < parts; ++p) m = std::max(m, ml(p)[0]);
    float* o = h.out + int64_t(qh) * h.hd;
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

}  // namespace

void run_attention_step(const StepCtx& c, const AttentionStep& s) {
  const Heads h(c, s);
  const int T = c.in.n_tokens;
  int64_t b, e;
  if (T == 1 && h.nkv < c.nth) {
    const int parts = std::min(c.nth / h.nkv, (c.in.pos0 + 1) / kMinPositionsPerPart);
    if (parts > 1) return attend_split(c, h, parts);
  }
  if (T == 1 || h.nkv % c.nth == 0) {
    ThreadPool::split(h.nkv, c.tid, c.nth, 1, &b, &e);
    for (int g = int(b); g < int(e); ++g) {
      for (int t = 0; t < T; ++t) {
        h.prepare_kv(t, g);
        for (int j = 0; j < h.group; ++j) h.prepare_q(t, g * h.group + j);
      }
      h.attend(g, 0, T, T == 1 && g + 1 < int(e) ? g + 1 : -1);
    }
    return;
  }
  const int heads = h.nh + h.nkv;
  ThreadPool::split(int64_t(T) * heads, c.tid, c.nth, 1, &b, &e);
  for (int64_t i = b; i < e; ++i) {
    const int t = int(i / heads), j = int(i % heads);
    if (j < h.nh)
      h.prepare_q(t, j);
    else
      h.prepare_kv(t, j - h.nh);
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
