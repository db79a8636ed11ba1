// The CUDA kernels as host functions that enqueue them on a stream (cu_*.cu). Activations are f32
// [rows, cols] row-major in device memory; weights are WeightViews of device memory (cu_math.h);
// the paged KV cache of a layer is [block][kv head][block_size][head_dim] of f32, f16 or bf16.
// Nothing here synchronizes or allocates, so a step's launches can be captured in a CUDA graph.
#pragma once
#ifdef HEARTH_CUDA_EMU
#include "tests/cuda_emu.h"
#else
#include <cuda_runtime.h>
#endif

#include <cstdint>

#include "backends/cuda/cu_math.h"

namespace hearth::HEARTH_CUDA_NS {

// The step's integers on the device: per row its token, position and where its sequence's block
// table starts in `blocks`; the rows whose logits are wanted.
struct StepDev {
  const int32_t* tokens = nullptr;
  const int32_t* pos = nullptr;
  const int32_t* table = nullptr;
  const int32_t* out_rows = nullptr;
  const int32_t* blocks = nullptr;
};

// out[r] = table[tokens[r]] widened to f32 (ids at or past vocab give zeros: the runner refuses
// them before a step).
void embed(const WeightView& table, int64_t vocab, const int32_t* tokens, int rows, float* out,
           cudaStream_t s);
// out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w over rows of `cols` (a per-head norm: rows of
// head_dim); may run in place.
void rms_norm(const float* x, const WeightView& w, float eps, int rows, int cols, float* out,
              cudaStream_t s);
// Rotate-half RoPE over rows of `heads` heads of 2 * half_dim; cos_sin holds per row half_dim
// pairs (cos, sin); out may be x.
void rope(const float* x, const float* cos_sin, int rows, int heads, int half_dim, float* out,
          cudaStream_t s);
// out = a + b (silu false) or silu(a) * b, n elements.
void binary(const float* a, const float* b, bool silu, int64_t n, float* out, cudaStream_t s);
// out[i] = x[out_rows[i]], rows of `cols`.
void gather_rows(const float* x, const int32_t* out_rows, int rows, int cols, float* out,
                 cudaStream_t s);

// out[t, n] = sum_k x[t, k] W[n, k] for t < rows (x rows of w.cols), n < n_rows; out rows of ldo.
// A warp per output row, the weight read once for up to 8 token rows (more rows: once per 8).
void matvec(const WeightView& w, int64_t n_rows, const float* x, int rows, float* out, int64_t ldo,
            cudaStream_t s);
// Rows of x ([rows, cols], cols a multiple of 32) to int8 per block of 32 (quantize_block_i8):
// codes [rows][cols / 4] words, scales [rows][cols / 32].
void quant_act(const float* x, int rows, int64_t cols, uint32_t* codes, float* scales,
               cudaStream_t s);
// matvec for Q8 and Q4 (uniform grid) weights on the int8 activations quant_act wrote, with dp4a.
void matvec_i8(const WeightView& w, int64_t n_rows, const uint32_t* xq, const float* xd, int rows,
               float* out, int64_t ldo, cudaStream_t s);
// W rows [r0, r0 + n) widened to 16-bit (bf16, or f16 when to_f16) for cuBLAS.
void dequant_rows(const WeightView& w, int64_t r0, int64_t n, bool to_f16, uint16_t* out,
                  cudaStream_t s);
// n f32 values rounded to bf16 (or f16).
void to_half(const float* x, int64_t n, bool to_f16, uint16_t* out, cudaStream_t s);

struct KVLayer {
  void* k = nullptr;
  void* v = nullptr;
  uint32_t type = kF32;  // kF32, kF16 or kBF16
  int n_kv_heads = 0, head_dim = 0, block_size = 0;
};
// Appends each row's keys and values ([rows, n_kv_heads * head_dim]) at its position.
void kv_store(const float* k, const float* v, const StepDev& step, int rows, const KVLayer& kv,
              cudaStream_t s);
// Causal GQA attention of q ([rows, heads * head_dim]) over each row's positions [0, pos]: the
// positions split over `splits` parts per (row, head), their partial softmaxes in `partials`
// ([rows][heads][splits][head_dim + 2] floats), then merged into out.
void attention(const float* q, const StepDev& step, int rows, int heads, const KVLayer& kv,
               float scale, int splits, float* partials, float* out, cudaStream_t s);
// The same attention for long steps (prefill, cu_attention_tiled.cu): the rows' queries and
// tiles of keys and values in shared memory, each key and value read once per eight rows.
void attention_tiled(const float* q, const StepDev& step, int rows, int heads, const KVLayer& kv,
                     float scale, float* out, cudaStream_t s);
// The index of each row's largest logit (first on ties, NaN ignored, -1 when none is above -inf).
void argmax(const float* logits, int rows, int64_t cols, int32_t* out, cudaStream_t s);
// The sampler's top-k of each row (cu_top_k.cu): the entries of core/gpu_readback.h for the rows
// whose ks[r] is not 0, kGpuTopKWords words per row; other rows' entries are left as they were.
void top_k(const float* logits, int rows, int64_t cols, const uint32_t* ks, uint32_t* entries,
           cudaStream_t s);

// Reads n bytes (a multiple of 16) and writes one word per block to sink: a bandwidth probe.
void read_probe(const void* src, size_t n, uint32_t* sink, cudaStream_t s);

}  // namespace hearth::HEARTH_CUDA_NS
