// Single graph nodes the planner did not fuse, run by the reference ops, each thread on its share
// (mixture-of-experts nodes by exec_moe.cpp).
#include <cmath>
#include <cstring>

#include "backends/cpu/compiled.h"
#include "backends/cpu/ops.h"

namespace hearth::cpu {

namespace {

// An attention node the planner could not fuse (the plain reference is enough for such graphs):
// store every row's k and v in its sequence's blocks, then attend row by row.
void reference_attention(const StepCtx& c, const Node& n) {
  float* out = c.ptr(n.out);
  const int64_t rows = c.rows(n.out);
  const int tid = c.tid, nth = c.nth;
  int64_t b, e;
  const float* q = c.ptr(n.in[0]);
  const float* k = c.ptr(n.in[1]);
  const float* v = c.ptr(n.in[2]);
  const int hd = n.p.head_dim, nkv = n.p.n_kv_heads, nh = n.p.n_heads, layer = n.p.layer;
  const CpuKVStorage& kv = *c.kv;
  const size_t esz = dtype_size(kv.dtype);
  const bool i8 = kv.dtype == DType::I8;
  auto seq_of = [&](int64_t t) {
    int s = 0;
    while (t >= c.in.seqs[s].row0 + c.in.seqs[s].n_rows) ++s;
    return c.in.seqs[s];
  };
  ThreadPool::split(rows * nkv, tid, nth, 1, &b, &e);
  for (int64_t p = b; p < e; ++p) {
    const int64_t t = p / nkv;
    const int h = int(p % nkv);
    const SeqRows sq = seq_of(t);
    const int pos = sq.pos0 + int(t - sq.row0);
    const int blk = sq.blocks[pos / kv.block_size], at = pos % kv.block_size;
    const size_t off = size_t(at) * size_t(hd) * esz;
    // No k_norm here to derive key channel factors from.
    store_kv_row(c.kt, kv.dtype, k + (t * nkv + h) * hd, nullptr, hd, kv.k(blk, layer, h) + off,
                 i8 ? kv.k_scale(blk, layer, h) + at : nullptr);
    store_kv_row(c.kt, kv.dtype, v + (t * nkv + h) * hd, nullptr, hd, kv.v(blk, layer, h) + off,
                 i8 ? kv.v_scale(blk, layer, h) + at : nullptr);
  }
  c.barrier.wait();
  const float scale = 1.f / std::sqrt(float(hd));
  const int group = nh / nkv;
  ThreadPool::split(rows * nh, tid, nth, 1, &b, &e);
  for (int64_t p = b; p < e; ++p) {
    const int64_t t = p / nh, h = p % nh;
    const int kvh = int(h / group);
    const SeqRows sq = seq_of(t);
    const KVPaging pg = kv.paging(sq);
    const KVRows kr{kv.k(0, layer, kvh), kv.dtype, i8 ? kv.k_scale(0, layer, kvh) : nullptr,
                    nullptr, pg};
    const KVRows vr{kv.v(0, layer, kvh), kv.dtype, i8 ? kv.v_scale(0, layer, kvh) : nullptr,
                    nullptr, pg};
    attend_one(q + (t * nh + h) * hd, kr, vr, sq.pos0 + int(t - sq.row0) + 1, hd, scale,
               out + (t * nh + h) * hd);
  }
}

}  // namespace

void run_node_step(const StepCtx& c, const Node& n) {
  float* out = c.ptr(n.out);
  const int64_t cols = c.tensor(n.out).cols;
  const int64_t rows = c.rows(n.out);
  auto in = [&](int s) { return c.ptr(n.in[s]); };
  const int tid = c.tid, nth = c.nth;
  int64_t b, e;
  switch (n.op) {
    case Op::Embed: {
      ThreadPool::split(rows, tid, nth, 1, &b, &e);
      // The table as the backend placed it: its own copy, or a tied head's (packed or coded).
      const Tensor& table = c.cg.weight[size_t(n.in[0])];
      const void* il = c.cg.w_il[size_t(n.in[0])];
      if (const void* exc = c.cg.w_exc[size_t(n.in[0])])
        embed_coded_rows(table, coded_bf16_view(il, exc, table.rows()), c.kt.decode_bf16_coded,
                         c.in.tokens, out, b, e);
      else if (reads_split(c.cg, table, il))
        embed_split_rows(table, c.cg.screen, c.in.tokens, out, b, e);
      else
        embed_rows(table, il, reads_panel(c.kt, table), c.in.tokens, out, b, e);
      break;
    }
    case Op::GatherRows:
      ThreadPool::split(rows, tid, nth, 1, &b, &e);
      for (int64_t r = b; r < e; ++r)
        std::memcpy(out + r * cols, in(0) + int64_t(c.in.out_rows[r]) * cols, size_t(cols) * 4);
      break;
    case Op::RmsNorm:
      ThreadPool::split(rows, tid, nth, 1, &b, &e);
      for (int64_t r = b; r < e; ++r)
        c.kt.rms_norm(in(0) + r * cols, c.cg.norm_w[size_t(n.in[1])], cols, n.p.eps,
                      out + r * cols);
      break;
    case Op::HeadRmsNorm:
      ThreadPool::split(rows * n.p.n_heads, tid, nth, 1, &b, &e);
      for (int64_t r = b; r < e; ++r) {
        const int64_t hd = n.p.head_dim;
        c.kt.rms_norm(in(0) + r * hd, c.cg.norm_w[size_t(n.in[1])], hd, n.p.eps, out + r * hd);
      }
      break;
    case Op::Rope:
      if (out != in(0)) {
        if (tid == 0) std::memcpy(out, in(0), size_t(rows * cols) * 4);
        c.barrier.wait();
      }
      ThreadPool::split(rows * n.p.n_heads, tid, nth, 1, &b, &e);
      rope_heads(out, n.p.n_heads, n.p.head_dim, c.cg.rope_cos.f(), c.cg.rope_sin.f(), b, e);
      break;
    case Op::Attention:
      reference_attention(c, n);
      break;
    case Op::SiluMul:
      ThreadPool::split(rows * cols, tid, nth, 16, &b, &e);
      if (b < e) c.kt.silu_mul(in(0) + b, in(1) + b, out + b, e - b);
      break;
    case Op::Add:
      ThreadPool::split(rows * cols, tid, nth, 16, &b, &e);
      add(in(0), in(1), out, b, e);
      break;
    case Op::MoE:
      run_moe_step(c, n);
      break;
    case Op::MatMul:  // always planned as a linear step
    case Op::kCount:
      break;
  }
}

}  // namespace hearth::cpu
