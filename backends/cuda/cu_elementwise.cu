// The small kernels of a step, one thread per element (or a block per row for the reductions):
// embedding, RMSNorm, RoPE, residual add and SiLU-mul, the gather of output rows, 16-bit
// conversions for cuBLAS, the KV store and the argmax; activations f32 [rows, cols] row-major.
#include "backends/cuda/cu_check.h"
#include "backends/cuda/cu_kernels.h"

namespace hearth::HEARTH_CUDA_NS {

namespace {

__global__ void embed_kernel(WeightView table, int64_t vocab, const int32_t* tokens, int rows,
                             float* out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, cols = table.cols;
  if (i >= int64_t(rows) * cols) return;
  const int64_t r = i / cols, c = i % cols, id = tokens[r];
  out[i] = id >= 0 && id < vocab ? weight_at(table, id, c) : 0.f;
}

__device__ float block_sum(float v, float* shared32) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared32[warp] = v;
  __syncthreads();
  v = lane < int(blockDim.x / 32) ? shared32[lane] : 0.f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Up to 1024 threads a block (rms_norm below): __launch_bounds__ keeps each within the 64
// registers that leaves, or the launch would fail for want of them.
__global__ void __launch_bounds__(1024)
    rms_norm_kernel(const float* x, WeightView w, float eps, int cols, float* out) {
  __shared__ float shared32[32];
  const float* row = x + int64_t(blockIdx.x) * cols;
  float ss = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) ss += row[c] * row[c];
  const float inv = rsqrtf(block_sum(ss, shared32) / float(cols) + eps);
  float* o = out + int64_t(blockIdx.x) * cols;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) o[c] = row[c] * inv * weight_at(w, 0, c);
}

__global__ void rope_kernel(const float* x, const float* cos_sin, int rows, int heads, int half_dim,
                            float* out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(rows) * heads * half_dim) return;
  const int64_t r = i / (int64_t(heads) * half_dim);
  const int h = int(i / half_dim % heads), k = int(i % half_dim);
  const int64_t b = (r * heads + h) * 2 * half_dim;
  const float c = cos_sin[(r * half_dim + k) * 2], s = cos_sin[(r * half_dim + k) * 2 + 1];
  const float x0 = x[b + k], x1 = x[b + k + half_dim];
  out[b + k] = x0 * c - x1 * s;
  out[b + k + half_dim] = x1 * c + x0 * s;
}

__global__ void binary_kernel(const float* a, const float* b, bool silu, int64_t n, float* out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = silu ? a[i] / (1.f + expf(-a[i])) * b[i] : a[i] + b[i];
}

__global__ void gather_kernel(const float* x, const int32_t* out_rows, int rows, int cols,
                              float* out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(rows) * cols) return;
  out[i] = x[int64_t(out_rows[i / cols]) * cols + i % cols];
}

__global__ void dequant_kernel(WeightView w, int64_t r0, int64_t n, bool to_f16, uint16_t* out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * w.cols) return;
  const float v = weight_at(w, r0 + i / w.cols, i % w.cols);
  out[i] = uint16_t(to_f16 ? f32_to_f16(v) : f32_to_bf16(v));
}

__global__ void to_half_kernel(const float* x, int64_t n, bool to_f16, uint16_t* out) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = uint16_t(to_f16 ? f32_to_f16(x[i]) : f32_to_bf16(x[i]));
}

__global__ void kv_store_kernel(const float* k, const float* v, StepDev step, int rows,
                                KVLayer kv) {
  const int width = kv.n_kv_heads * kv.head_dim;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(rows) * width) return;
  const int r = int(i / width), c = int(i % width), h = c / kv.head_dim, d = c % kv.head_dim;
  const int p = step.pos[r];
  const int32_t blk = step.blocks[step.table[r] + p / kv.block_size];
  const int64_t at =
      kv_index(blk, h, kv.n_kv_heads, p % kv.block_size, kv.block_size, kv.head_dim) + d;
  if (kv.type == kF32) {
    static_cast<float*>(kv.k)[at] = k[i];
    static_cast<float*>(kv.v)[at] = v[i];
  } else {
    const bool f16 = kv.type == kF16;
    static_cast<uint16_t*>(kv.k)[at] = uint16_t(f16 ? f32_to_f16(k[i]) : f32_to_bf16(k[i]));
    static_cast<uint16_t*>(kv.v)[at] = uint16_t(f16 ? f32_to_f16(v[i]) : f32_to_bf16(v[i]));
  }
}

constexpr int kArgmaxThreads = 1024;

__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_kernel(const float* logits, int64_t cols, int32_t* out) {
  __shared__ float best_v[kArgmaxThreads];
  __shared__ int best_i[kArgmaxThreads];
  const float* row = logits + int64_t(blockIdx.x) * cols;
  float bv = 0.f;
  int bi = -1;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
    if (argmax_beats(row[c], int(c), bv, bi)) bv = row[c], bi = int(c);
  best_v[threadIdx.x] = bv;
  best_i[threadIdx.x] = bi;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (int(threadIdx.x) < s && argmax_beats(best_v[threadIdx.x + s], best_i[threadIdx.x + s],
                                             best_v[threadIdx.x], best_i[threadIdx.x])) {
      best_v[threadIdx.x] = best_v[threadIdx.x + s];
      best_i[threadIdx.x] = best_i[threadIdx.x + s];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) out[blockIdx.x] = best_i[0];
}

__global__ void read_probe_kernel(const uint4* src, size_t n, uint32_t* sink) {
  uint32_t acc = 0;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    const uint4 u = src[i];
    acc ^= u.x ^ u.y ^ u.z ^ u.w;
  }
  if (acc == 0x9e3779b9u) sink[blockIdx.x] = acc;  // keeps the loads; almost never stores
}

constexpr int kThreads = 256;

}  // namespace

void embed(const WeightView& table, int64_t vocab, const int32_t* tokens, int rows, float* out,
           cudaStream_t s) {
  HEARTH_LAUNCH(blocks_for(rows * table.cols, kThreads), kThreads, s, embed_kernel)
  (table, vocab, tokens, rows, out);
  launched("embedding");
}

void rms_norm(const float* x, const WeightView& w, float eps, int rows, int cols, float* out,
              cudaStream_t s) {
  const int threads = cols >= 1024 ? 1024 : cols >= 256 ? 256 : 64;
  HEARTH_LAUNCH(rows, threads, s, rms_norm_kernel)(x, w, eps, cols, out);
  launched("rms_norm");
}

void rope(const float* x, const float* cos_sin, int rows, int heads, int half_dim, float* out,
          cudaStream_t s) {
  HEARTH_LAUNCH(blocks_for(int64_t(rows) * heads * half_dim, kThreads), kThreads, s, rope_kernel)
  (x, cos_sin, rows, heads, half_dim, out);
  launched("rope");
}

void binary(const float* a, const float* b, bool silu, int64_t n, float* out, cudaStream_t s) {
  HEARTH_LAUNCH(blocks_for(n, kThreads), kThreads, s, binary_kernel)(a, b, silu, n, out);
  launched(silu ? "silu_mul" : "add");
}

void gather_rows(const float* x, const int32_t* out_rows, int rows, int cols, float* out,
                 cudaStream_t s) {
  HEARTH_LAUNCH(blocks_for(int64_t(rows) * cols, kThreads), kThreads, s, gather_kernel)
  (x, out_rows, rows, cols, out);
  launched("gather_rows");
}

void dequant_rows(const WeightView& w, int64_t r0, int64_t n, bool to_f16, uint16_t* out,
                  cudaStream_t s) {
  HEARTH_LAUNCH(blocks_for(n * w.cols, kThreads), kThreads, s, dequant_kernel)
  (w, r0, n, to_f16, out);
  launched("dequant_rows");
}

void to_half(const float* x, int64_t n, bool to_f16, uint16_t* out, cudaStream_t s) {
  HEARTH_LAUNCH(blocks_for(n, kThreads), kThreads, s, to_half_kernel)(x, n, to_f16, out);
  launched("to_half");
}

void kv_store(const float* k, const float* v, const StepDev& step, int rows, const KVLayer& kv,
              cudaStream_t s) {
  const int64_t n = int64_t(rows) * kv.n_kv_heads * kv.head_dim;
  HEARTH_LAUNCH(blocks_for(n, kThreads), kThreads, s, kv_store_kernel)(k, v, step, rows, kv);
  launched("kv_store");
}

void argmax(const float* logits, int rows, int64_t cols, int32_t* out, cudaStream_t s) {
  HEARTH_LAUNCH(rows, kArgmaxThreads, s, argmax_kernel)(logits, cols, out);
  launched("argmax");
}

void read_probe(const void* src, size_t n, uint32_t* sink, cudaStream_t s) {
  HEARTH_LAUNCH(1024, kThreads, s, read_probe_kernel)(static_cast<const uint4*>(src), n / 16, sink);
  launched("read_probe");
}

}  // namespace hearth::HEARTH_CUDA_NS
