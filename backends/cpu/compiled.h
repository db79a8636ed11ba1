// The CPU backend's compiled graph and the per-step execution context its step runners share.
// Everything a step touches is allocated by compile(); a step allocates nothing.
#pragma once
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/gemm.h"
#include "backends/cpu/head_screen.h"
#include "backends/cpu/plan.h"

namespace hearth::cpu {

struct Buffer {
  std::unique_ptr<uint8_t[], void (*)(void*)> p{nullptr, std::free};
  size_t bytes = 0;
  void alloc(size_t n, const char* what);
  float* f() const { return reinterpret_cast<float*>(p.get()); }
  uint16_t* u16() const { return reinterpret_cast<uint16_t*>(p.get()); }
};

// Rows per block when an epilogue (SiluMul, argmax) consumes a matmul's output while it is in L1:
// at least kBlockRows, and for a few tokens as many as fill kEpilogueFloats. Each block is a
// kernel call that restarts its row passes and prefetches; at 64 rows a decode token made ~5000
// of them (gate/up and the LM head): 0.6B INT4 decode on Zen 5 69-71 t/s, against 73-74 now.
constexpr int64_t kBlockRows = 64;
constexpr int64_t kEpilogueFloats = 4096;
inline int64_t epilogue_rows(int64_t n_tokens) {
  const int64_t n = kEpilogueFloats / (n_tokens > 0 ? n_tokens : 1) / kBlockRows * kBlockRows;
  return n > kBlockRows ? n : kBlockRows;
}
// Weight rows per block when 16-bit or quantized weights are widened or dequantized for the GEMM
// library (the `wide` scratch holds one block).
constexpr int64_t kGemmBlockRows = 128;
// Weight rows per GEMM call when the output passes through an epilogue (gate/up with SiLU, the
// LM head with argmax), and per block of packed BF16 weights (--hugepages) unpacked for the GEMM
// library. Each library call has its own set-up; at 128 rows, a 512-token 0.6B BF16 prefill ran
// at 390-405 t/s on one Zen 5 core against 408-412 at 512 (256: 387-398, 1024: 392-413), and at
// 716-733 against 744-793 on two.
constexpr int64_t kGemmEpilogueRows = 512;
constexpr int64_t kUnpackRows = 512;
// Up to this many tokens every thread normalises the step's input itself instead of sharing one
// copy behind a barrier.
constexpr int kPrivateNormTokens = 4;

// The MoE nodes' shared buffers (exec_moe.cpp), for steps of up to T tokens and k experts each:
// the T * k routed rows are gathered expert by expert, so each active expert's weights are read
// once for all of its tokens.
struct MoeBuffers {
  Buffer mem;
  int64_t slots = 0;          // T * k
  float* logits = nullptr;    // [T, n_experts] router logits
  int32_t* expert = nullptr;  // [T * k] slot t * k + j: token t's j-th expert
  float* weight = nullptr;    // [T * k] its weight
  int32_t* start = nullptr;   // [n_experts + 1] first gathered row of each expert
  int32_t* next = nullptr;    // [n_experts + 1] the counting sort's cursors
  int32_t* row = nullptr;     // [T * k] slot -> gathered row
  int32_t* token = nullptr;   // [T * k] gathered row -> token
  float* x = nullptr;         // [T * k, hidden] gathered inputs
  float* g = nullptr;         // [T * k, inter] gate, then silu(gate) * up
  float* u = nullptr;         // [T * k, inter] up
  float* d = nullptr;         // [T * k, hidden] down
};

struct CpuCompiled : CompiledGraph {
  const Graph* graph = nullptr;
  std::vector<Step> steps;
  std::vector<size_t> offset;        // per tensor: byte offset of an activation in the arena
  std::vector<const float*> norm_w;  // per tensor: f32 copy of a norm weight (else null)
  std::vector<std::vector<float>> norm_store;
  // Per tensor: an I8 cache's key channel factors from a k_norm weight (kv_key_factors), or null.
  std::vector<const float*> k_factor;
  std::vector<std::vector<float>> k_factor_store;
  Buffer arena;
  Buffer normed;  // [max_tokens, max norm width]: a long step's normalised input, shared
  Buffer x_bf16;  // [max_tokens, max k]: a long step's input rounded for a bf16 GEMM, shared
  Buffer x_i8;    // a long step's input quantized for the kernels' int8 GEMM, shared (ActsI8)

  // Per thread, `per_thread` floats each, carved as below.
  Buffer scratch;
  size_t per_thread = 0;
  size_t off_xn = 0, off_tmp = 0, off_wide = 0, off_unpack = 0, off_mm = 0, off_attn = 0;
  size_t tmp_floats = 0;  // each of the two epilogue blocks

  // RoPE: inverse frequencies in double (positions reach 40k, theta 1e6) and this step's tables.
  std::vector<double> inv_freq;
  Buffer rope_cos, rope_sin;  // [max_tokens, head_dim / 2]
  int rope_head_dim = 0;

  // Greedy decoding: each thread's best logit and its index per output row.
  std::vector<float> best_val;
  std::vector<int32_t> best_idx;

  // Greedy decoding of one token through the LM head's screen (head_screen.h), when the backend
  // keeps weight copies and the head is BF16, or Q8 where a kernel reads its screen: the head's
  // weight id, the screen, and per thread room for the candidate rows of its range.
  int screen_w = -1;
  HeadScreen screen;
  Buffer screen_cand;  // [threads][screen_cap]
  int64_t screen_cap = 0;
  int64_t screen_scratch = 0;  // where the screen's part of the off_mm scratch starts
  // A floor any thread has proven this step, whichever thread's range a row is in: greedy, the
  // largest head logit computed (no row whose upper bound is below it can be the argmax); top-k,
  // the highest k-th largest of one range's lower bounds or exact logits.
  std::atomic<float> screen_best{-INFINITY};
  ScreenPolicy screen_policy;
  size_t head_step = SIZE_MAX;  // the index of the screened head's step
  bool screen_on = false;       // this step's one-token head goes through the screen
  std::chrono::steady_clock::time_point head_t0;  // when thread 0 began the head's step
  // Top-k: the k largest exact logits each thread computed first ([threads][kTopkShared]), for the
  // others to merge into the floor, and the step they belong to (run_no when published).
  static constexpr int kTopkShared = 64;
  Buffer topk_shared;
  std::unique_ptr<std::atomic<uint64_t>[]> topk_ready;
  uint64_t run_no = 0;
  // A split Q8 head's screen estimates and bounds of every row of a thread's range, for top-k's
  // refinement by the low bits ([threads][2][screen_cap]), where KernelTable::refine_q8_split is.
  Buffer screen_est;
  // What the screened functions did this step: head rows computed exactly, rows refined by their
  // low bits, whether they ran.
  std::atomic<int64_t> screen_rows{0}, screen_low_rows{0};
  std::atomic<bool> screen_ran{false};

  MoeBuffers moe;

  // Per step, a counter of the rows or items its threads have taken (RowClaims, attend_items),
  // zeroed before each run.
  std::unique_ptr<std::atomic<int64_t>[]> claims;
  // Decode attention split over positions: per thread, one range's unnormalised rows and their
  // {max, sum} pairs (see attend_split).
  Buffer attn_parts;
  int64_t attn_part_floats = 0;
  std::vector<float*> ptr;  // per tensor, set at the start of each run
  // Per tensor, for the weights of linear steps: the weight as the matmuls read it (the model's, or
  // the backend's private copy with BackendOptions::weight_copies), and its packed BF16 copy for
  // MatmulArgs::w_il (else null); for a BF16 weight kept coded (bf16_coded.h), w_il is its
  // coded groups and w_exc its exceptions (else null).
  std::vector<Tensor> weight;
  std::vector<const void*> w_il;
  std::vector<const void*> w_exc;

  float* thread_scratch(int tid) const { return scratch.f() + size_t(tid) * per_thread; }
};

// A long step's input quantized by KernelTable::quant_act into CpuCompiled::x_i8: codes [T][k],
// then block scales and code sums [T][k / 32].
struct ActsI8 {
  int8_t* q = nullptr;
  float* d = nullptr;
  int32_t* sum = nullptr;
  static size_t q_bytes(int64_t T, int64_t k) { return size_t((T * k + 63) / 64 * 64); }
  static size_t d_floats(int64_t T, int64_t k) { return size_t((T * k / 32 + 15) / 16 * 16); }
  static size_t bytes(int64_t T, int64_t k) { return q_bytes(T, k) + 2 * d_floats(T, k) * 4; }
  static ActsI8 in(const Buffer& b, int64_t T, int64_t k) {
    ActsI8 a;
    a.q = reinterpret_cast<int8_t*>(b.p.get());
    a.d = reinterpret_cast<float*>(b.p.get() + q_bytes(T, k));
    a.sum = reinterpret_cast<int32_t*>(a.d + d_floats(T, k));
    return a;
  }
};

// What a step runner sees: the compiled graph, this step's inputs, and the calling thread.
struct StepCtx {
  CpuCompiled& cg;
  const StepInputs& in;
  const KernelTable& kt;
  Gemm* gemm;
  GemmKind gemm_kind;
  int gemm_min_tokens;
  CpuKVStorage* kv;
  SpinBarrier& barrier;
  int tid, nth;

  const GraphTensor& tensor(int id) const { return cg.graph->tensor(id); }
  float* ptr(int id) const { return cg.ptr[size_t(id)]; }
  int64_t rows(int id) const { return tensor(id).rows == Rows::Tokens ? in.n_tokens : in.n_out; }
  float* scratch() const { return cg.thread_scratch(tid); }
};

// What a matmul reads of a placed weight beside its Tensor (CpuCompiled::w_il, w_exc): its copy
// (packed rows, panels, coded groups) or null, and a coded BF16 copy's exceptions or null.
struct WeightCopy {
  const void* il = nullptr;
  const void* exc = nullptr;
  WeightCopy(const void* il = nullptr, const void* exc = nullptr) : il(il), exc(exc) {}  // NOLINT
};

// y[t * ldy + (r - r0)] = x[t] . w[r] for the T rows of x (ldx = w.cols()) and rows [r0, r1) of
// w, in its stored type, through the kernel table (exec_linear.cpp). copy: its copy, if any; the
// caller goes on to read rows up to prefetch_r1 next; reuse_x: this thread's previous call had the
// same x and a weight of the same quantized kernel; xi8: x already quantized.
void matmul_rows(const StepCtx& c, const Tensor& w, WeightCopy copy, const float* x, int64_t T,
                 int64_t r0, int64_t r1, float* y, int64_t ldy, int64_t prefetch_r1 = 0,
                 bool reuse_x = false, const ActsI8* xi8 = nullptr);

// Whether w, left in the model's mapping (w_il null), is a Q8 LM head kept as its screen and low
// bits (head_screen.h; a tied embedding table too): its kernels read those, never w.data.
inline bool reads_split(const CpuCompiled& cg, const Tensor& w, const void* w_il) {
  return cg.screen.lo && !w_il && w.data == cg.graph->tensors()[size_t(cg.screen_w)].weight.data;
}

// Whether two weights go through the same quantized kernel on the same layout, packed copy (a_il,
// b_il) or not, so one may reuse the other's derived activations (QuantMatmulArgs::reuse_x).
inline bool same_quant_kernel(const Tensor& a, const void* a_il, const Tensor& b,
                              const void* b_il) {
  return a.quantized() && a.dtype == b.dtype &&
         (a.codebook != nullptr) == (b.codebook != nullptr) &&
         (a_il != nullptr) == (b_il != nullptr);
}

// The LM head of one token (one part, cg.screen_w) through its screen (exec_screened_head.cpp):
// the argmax into the thread's best_val/best_idx, or the logits into out where they can be among
// the k largest and -inf elsewhere (StepInputs::top_k).
void argmax_screened(const StepCtx& c, const LinearStep& s, const float* x);
void topk_screened(const StepCtx& c, const LinearStep& s, const float* x, int k, float* out);

void run_node_step(const StepCtx& c, const Node& n);
// claim: the step's counter for RowClaims (rows, heads), zero before the step.
void run_linear_step(const StepCtx& c, const LinearStep& s, std::atomic<int64_t>& claim);
void run_attention_step(const StepCtx& c, const AttentionStep& s, std::atomic<int64_t>& claim);
void run_moe_step(const StepCtx& c, const Node& n);
// Carves cg.moe for steps of up to max_tokens tokens of MoE node n.
void alloc_moe_buffers(CpuCompiled& cg, const Node& n, int max_tokens);

}  // namespace hearth::cpu
