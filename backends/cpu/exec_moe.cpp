// Mixture-of-experts steps (Op::MoE): x [T, hidden] f32 rows; the router R [experts, hidden] and
// each expert's gate/up [inter, hidden] and down [hidden, inter] in their stored types (F32, F16,
// BF16, Q8, Q4), read through the matmul kernels; the routed rows are gathered expert by expert.
//
// A step runs in phases, every thread on its share, a barrier between them: router logits, top-k
// per token, the gather (rows grouped by expert), gate and up of every active expert with their
// SiLU-mul, down, and the weighted sum back into each token's row. Decode reads only the chosen
// experts' weights, and its one token is neither routed apart from its sort nor gathered;
// prefill reads each active expert's once for all of its tokens.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/compiled.h"
#include "core/error.h"

namespace hearth::cpu {

namespace {

constexpr int kMaxTopK = 256;
constexpr int kMaxExperts = 1024;

// The weights as the backend placed them (CpuCompiled::weight), with their copies.
const Tensor& placed(const StepCtx& c, int id) {
  return c.cg.weight[size_t(id)];
}
WeightCopy copy_of(const StepCtx& c, int id) {
  return {c.cg.w_il[size_t(id)], c.cg.w_exc[size_t(id)]};
}
int expert_id(const Node& n, int e, int which) {
  return n.in[2] + 3 * e + which;  // 0 gate, 1 up, 2 down
}

// Token t's top-k experts by router logit (the softmax keeps the order; ties: lower index) and
// their weights: softmax probabilities over all experts, renormalised over the k when asked.
void route(const float* logits, int n_experts, int k, bool renormalise, int32_t* expert,
           float* weight) {
  float mx = -INFINITY;
  for (int e = 0; e < n_experts; ++e) mx = std::max(mx, logits[e]);
  double sum = 0;
  for (int e = 0; e < n_experts; ++e) sum += std::exp(double(logits[e]) - mx);
  // k passes over the logits, each taking the largest not yet taken (the first of equals).
  bool taken[kMaxExperts] = {};
  for (int j = 0; j < k; ++j) {
    int best = -1;
    for (int e = 0; e < n_experts; ++e)
      if (!taken[e] && (best < 0 || logits[e] > logits[best])) best = e;
    expert[j] = best;
    taken[best] = true;
  }
  double kept = 0;
  double p[kMaxTopK];
  for (int j = 0; j < k; ++j) kept += p[j] = std::exp(double(logits[expert[j]]) - mx) / sum;
  for (int j = 0; j < k; ++j) weight[j] = float(renormalise ? p[j] / kept : p[j]);
}

// Runs fn(expert, r0, r1) for this thread's share of the rows [0, rows) of every active expert's
// matrix, in blocks of 16 rows.
template <typename Fn>
void expert_rows(const StepCtx& c, const MoeBuffers& m, int n_experts, int64_t rows, Fn fn) {
  int active = 0;
  for (int e = 0; e < n_experts; ++e) active += m.start[e + 1] > m.start[e];
  int64_t b, end;
  ThreadPool::split(int64_t(active) * rows, c.tid, c.nth, 16, &b, &end);
  int64_t at = 0;
  for (int e = 0; e < n_experts && at < end; ++e) {
    if (m.start[e + 1] == m.start[e]) continue;
    const int64_t r0 = std::max<int64_t>(b - at, 0), r1 = std::min<int64_t>(end - at, rows);
    if (r0 < r1) fn(e, r0, r1);
    at += rows;
  }
}

}  // namespace

void alloc_moe_buffers(CpuCompiled& cg, const Node& n, int max_tokens) {
  const Graph& g = *cg.graph;
  const int64_t E = n.p.n_experts, K = n.p.top_k, H = g.tensor(n.out).cols;
  const int64_t mi = g.tensor(n.in[2]).weight.rows();
  const int64_t S = int64_t(max_tokens) * K;
  if (K > kMaxTopK) fail("cpu backend: ", K, " experts per token; at most ", kMaxTopK);
  if (E > kMaxExperts) fail("cpu backend: ", E, " experts; at most ", kMaxExperts);
  if (cg.moe.slots >= S && cg.moe.mem.bytes) return;  // every MoE node of a model is alike
  auto r16 = [](int64_t v) { return size_t((v + 15) / 16 * 16); };
  const size_t floats =
      r16(max_tokens * E) + r16(S) * 4 + r16(E + 1) * 2 + r16(S * H) * 2 + r16(S * mi) * 2;
  cg.moe.mem.alloc(floats * 4, "mixture-of-experts buffers");
  float* p = cg.moe.mem.f();
  auto take = [&](int64_t n_floats) {
    float* q = p;
    p += r16(n_floats);
    return q;
  };
  MoeBuffers& m = cg.moe;
  m.slots = S;
  m.logits = take(max_tokens * E);
  m.expert = reinterpret_cast<int32_t*>(take(S));
  m.weight = take(S);
  m.start = reinterpret_cast<int32_t*>(take(E + 1));
  m.next = reinterpret_cast<int32_t*>(take(E + 1));
  m.row = reinterpret_cast<int32_t*>(take(S));
  m.token = reinterpret_cast<int32_t*>(take(S));
  m.x = take(S * H);
  m.g = take(S * mi);
  m.u = take(S * mi);
  m.d = take(S * H);
}

namespace {

// Router logits, each token's top-k, and the rows gathered by expert (a counting sort of the T * k
// slots by thread 0: a few thousand entries at most). One token (decode) is routed by thread 0,
// which sorts it next, and is not gathered: every expert reads it where it is (expert_x).
void route_rows(const StepCtx& c, const Node& n, MoeBuffers& m, const float* x, int64_t T,
                int64_t H) {
  const int E = n.p.n_experts, K = n.p.top_k;
  int64_t b, e;
  ThreadPool::split(E, c.tid, c.nth, 1, &b, &e);
  if (b < e) matmul_rows(c, placed(c, n.in[1]), copy_of(c, n.in[1]), x, T, b, e, m.logits + b, E);
  c.barrier.wait();
  ThreadPool::split(T, c.tid, c.nth, 1, &b, &e);
  for (int64_t t = b; t < e; ++t)
    route(m.logits + t * E, E, K, n.p.norm_topk, m.expert + t * K, m.weight + t * K);
  if (T > 1) c.barrier.wait();
  if (c.tid == 0) {
    std::fill(m.start, m.start + E + 1, 0);
    for (int64_t s = 0; s < T * K; ++s) ++m.start[m.expert[s] + 1];
    for (int i = 0; i < E; ++i) m.start[i + 1] += m.start[i];
    std::copy(m.start, m.start + E, m.next);
    for (int64_t s = 0; s < T * K; ++s) {
      const int32_t r = m.next[m.expert[s]]++;
      m.row[s] = r;
      m.token[r] = int32_t(s / K);
    }
  }
  c.barrier.wait();
  if (T == 1) return;
  ThreadPool::split(T * K, c.tid, c.nth, 1, &b, &e);
  for (int64_t r = b; r < e; ++r)
    std::memcpy(m.x + r * H, x + int64_t(m.token[r]) * H, size_t(H) * 4);
  c.barrier.wait();
}

// The rows expert ex multiplies: its gathered rows, or the one token itself.
const float* expert_x(const MoeBuffers& m, const float* x, int64_t T, int64_t H, int ex) {
  return T == 1 ? x : m.x + int64_t(m.start[ex]) * H;
}

// down(silu(gate x) * up x) of every active expert over its gathered rows, into m.d. A thread
// takes the same rows of gate and up, as the dense SwiGLU does, and applies SiLU-mul to them; with
// one token every expert multiplies the same x, so its int8 activations are made once per thread.
void run_experts(const StepCtx& c, const Node& n, MoeBuffers& m, const float* x, int64_t T,
                 int64_t H) {
  const int E = n.p.n_experts;
  const int64_t mi = placed(c, expert_id(n, 0, 0)).rows();
  const Tensor* prev = nullptr;  // this thread's previous weight (one token: the same x for all)
  const void* prev_il = nullptr;
  expert_rows(c, m, E, mi, [&](int ex, int64_t r0, int64_t r1) {
    const int64_t first = m.start[ex], rows = m.start[ex + 1] - first;
    const float* xs = expert_x(m, x, T, H, ex);
    const Tensor& wg = placed(c, expert_id(n, ex, 0));
    const Tensor& wu = placed(c, expert_id(n, ex, 1));
    const WeightCopy g_il = copy_of(c, expert_id(n, ex, 0));
    const WeightCopy u_il = copy_of(c, expert_id(n, ex, 1));
    float* g = m.g + first * mi + r0;
    float* u = m.u + first * mi + r0;
    const bool reuse = T == 1 && prev && same_quant_kernel(*prev, prev_il, wg, g_il.il);
    matmul_rows(c, wg, g_il, xs, rows, r0, r1, g, mi, 0, reuse);
    matmul_rows(c, wu, u_il, xs, rows, r0, r1, u, mi, 0,
                same_quant_kernel(wg, g_il.il, wu, u_il.il));
    prev = &wu, prev_il = u_il.il;
    for (int64_t t = 0; t < rows; ++t) c.kt.silu_mul(g + t * mi, u + t * mi, g + t * mi, r1 - r0);
  });
  c.barrier.wait();
  expert_rows(c, m, E, H, [&](int ex, int64_t r0, int64_t r1) {
    const int64_t first = m.start[ex], rows = m.start[ex + 1] - first;
    const int id = expert_id(n, ex, 2);
    matmul_rows(c, placed(c, id), copy_of(c, id), m.g + first * mi, rows, r0, r1,
                m.d + first * H + r0, H);
  });
  c.barrier.wait();
}

}  // namespace

void run_moe_step(const StepCtx& c, const Node& n) {
  MoeBuffers& m = c.cg.moe;
  const int64_t T = c.rows(n.out), H = c.tensor(n.out).cols;
  const int K = n.p.top_k;
  route_rows(c, n, m, c.ptr(n.in[0]), T, H);
  run_experts(c, n, m, c.ptr(n.in[0]), T, H);
  // Each token's weighted sum, its experts in rank order.
  float* out = c.ptr(n.out);
  int64_t b, e;
  ThreadPool::split(T, c.tid, c.nth, 1, &b, &e);
  for (int64_t t = b; t < e; ++t) {
    float* o = out + t * H;
    std::fill(o, o + H, 0.f);
    for (int j = 0; j < K; ++j) {
      const float w = m.weight[t * K + j];
      const float* d = m.d + int64_t(m.row[t * K + j]) * H;
      for (int64_t i = 0; i < H; ++i) o[i] += w * d[i];
    }
  }
}

}  // namespace hearth::cpu
