// Causal GQA attention for long steps (prefill) over the paged KV cache ([block][kv head]
// [block_size][head_dim]): a block of 128 threads per (query head, eight step rows) stages the
// rows' queries and then 16 positions at a time of keys and values in shared memory, so each key
// and value is read once per eight rows; a score per thread, an online softmax per row, and each
// thread keeps up to 16 (row, element) sums. Rows of one block from different sequences (another
// block table) go through the positions run by run. The same tiles as Vulkan's
// attention_tiled.comp.
#include "backends/cuda/cu_check.h"
#include "backends/cuda/cu_kernels.h"

namespace hearth::HEARTH_CUDA_NS {

namespace {

constexpr int kRows = 8, kPos = 16, kThreads = 128, kMaxHd = 256;

struct Tiles {
  float q[kRows][kMaxHd];
  float kv[kPos][kMaxHd + 1];  // keys, then values; a row's padding spreads the score loads
  float p[kRows][kPos];        // scores, then softmax weights
  float rescale[kRows], m[kRows], l[kRows];
};

__device__ float kv_at(const void* base, uint32_t type, int64_t at) {
  if (type == kF32) return static_cast<const float*>(base)[at];
  return half_to_f32(static_cast<const uint16_t*>(base)[at], type);
}

// Positions [p0, p0 + kPos) of one table's keys or values into t.kv (zeros past last).
__device__ void stage(Tiles& t, const void* base, const KVLayer& kv, const int32_t* table, int kh,
                      int p0, int last) {
  const int hd = kv.head_dim;
  for (int o = threadIdx.x; o < kPos * hd; o += kThreads) {
    const int i = o / hd, d = o % hd, p = p0 + i;
    t.kv[i][d] = p <= last ? kv_at(base, kv.type,
                                   kv_index(table[p / kv.block_size], kh, kv.n_kv_heads,
                                            p % kv.block_size, kv.block_size, hd) +
                                       d)
                           : 0.f;
  }
}

// The softmax weights of row i over the tile's scores, its sum and maximum carried on.
__device__ void softmax_row(Tiles& t, int i) {
  float mx = t.m[i];
  for (int j = 0; j < kPos; ++j) mx = fmaxf(mx, t.p[i][j]);
  const float corr = mx == neg_inf() ? 1.f : expf(t.m[i] - mx);
  float sum = 0.f;
  for (int j = 0; j < kPos; ++j) {
    const float e = t.p[i][j] == neg_inf() ? 0.f : expf(t.p[i][j] - mx);
    t.p[i][j] = e;
    sum += e;
  }
  t.l[i] = t.l[i] * corr + sum;
  t.m[i] = mx;
  t.rescale[i] = corr;
}

__global__ void __launch_bounds__(kThreads)
    attention_tiled_kernel(const float* q, StepDev step, int rows, int heads, KVLayer kv,
                           float scale, float* out) {
  __shared__ Tiles t;
  const int h = blockIdx.x, r0 = blockIdx.y * kRows, hd = kv.head_dim;
  const int kh = h / (heads / kv.n_kv_heads), n_rows = rows - r0 < kRows ? rows - r0 : kRows;
  const int64_t width = int64_t(heads) * hd;
  float acc[16];
  for (int run = 0; run < n_rows;) {  // rows [run, end) share a block table
    const int table_at = step.table[r0 + run];
    int end = run + 1, last = step.pos[r0 + run];
    for (; end < n_rows && step.table[r0 + end] == table_at; ++end)
      last = step.pos[r0 + end] > last ? step.pos[r0 + end] : last;
    const int32_t* table = step.blocks + table_at;
    for (int o = threadIdx.x; o < kRows * kMaxHd; o += kThreads) {
      const int i = o / kMaxHd, d = o % kMaxHd;
      t.q[i][d] = i >= run && i < end && d < hd ? q[(r0 + i) * width + h * hd + d] * scale : 0.f;
    }
    if (threadIdx.x < kRows) t.m[threadIdx.x] = neg_inf(), t.l[threadIdx.x] = 0.f;
    for (int j = 0; j < 16; ++j) acc[j] = 0.f;
    __syncthreads();
    for (int p0 = 0; p0 <= last; p0 += kPos) {
      stage(t, kv.k, kv, table, kh, p0, last);
      __syncthreads();
      {  // a score per thread: row threadIdx.x / 16, position threadIdx.x % 16
        const int i = threadIdx.x / kPos, j = threadIdx.x % kPos;
        float s = neg_inf();
        if (i >= run && i < end && p0 + j <= step.pos[r0 + i]) {
          s = 0.f;
          for (int d = 0; d < hd; ++d) s += t.q[i][d] * t.kv[j][d];
        }
        t.p[i][j] = s;
      }
      __syncthreads();
      if (threadIdx.x < kRows) softmax_row(t, threadIdx.x);
      __syncthreads();  // the keys are scored before the values replace them
      stage(t, kv.v, kv, table, kh, p0, last);
      __syncthreads();
      for (int j = 0; j < 16; ++j) {
        const int o = threadIdx.x + kThreads * j, i = o / hd, d = o % hd;
        if (o >= kRows * hd) break;
        float a = acc[j] * t.rescale[i];
        for (int x = 0; x < kPos; ++x) a += t.p[i][x] * t.kv[x][d];
        acc[j] = a;
      }
      __syncthreads();  // done with kv and p before the next tile
    }
    for (int j = 0; j < 16; ++j) {
      const int o = threadIdx.x + kThreads * j, i = o / hd, d = o % hd;
      if (o >= kRows * hd) break;
      if (i >= run && i < end) out[(r0 + i) * width + h * hd + d] = acc[j] / t.l[i];
    }
    __syncthreads();  // m, l and q are rewritten by the next run
    run = end;
  }
}

}  // namespace

void attention_tiled(const float* q, const StepDev& step, int rows, int heads, const KVLayer& kv,
                     float scale, float* out, cudaStream_t s) {
  if (kv.head_dim > kMaxHd) fail("CUDA attention: head_dim over ", kMaxHd);
  const dim3 grid{unsigned(heads), unsigned((rows + kRows - 1) / kRows)};
  HEARTH_LAUNCH(grid, kThreads, s, attention_tiled_kernel)(q, step, rows, heads, kv, scale, out);
  launched("attention_tiled");
}

}  // namespace hearth::HEARTH_CUDA_NS
