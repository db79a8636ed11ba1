// Causal GQA attention over the paged KV cache ([block][kv head][block_size][head_dim]), split over
// positions (flash-decoding): a block of four warps per (query head, row, part) scores its part's
// positions a warp each (lanes hold head-dim elements lane, lane + 32, ...; a warp-shuffle sum per
// position), keeps an online softmax per warp and merges the four into one partial
// ([head_dim] weighted values, then max and sum); a second kernel merges a row's parts.
#include "backends/cuda/cu_check.h"
#include "backends/cuda/cu_kernels.h"

namespace hearth::HEARTH_CUDA_NS {

namespace {

constexpr int kWarps = 4;
constexpr int kMaxHeadDim = 256;

template <int EPL>
__device__ void load_row(const void* base, int64_t at, uint32_t type, int lane, int hd,
                         float out[EPL]) {
#pragma unroll
  for (int i = 0; i < EPL; ++i) {
    const int d = lane + 32 * i;
    if (d >= hd)
      out[i] = 0.f;
    else if (type == kF32)
      out[i] = static_cast<const float*>(base)[at + d];
    else
      out[i] = half_to_f32(static_cast<const uint16_t*>(base)[at + d], type);
  }
}

// EPL: head-dim elements per lane (head_dim <= 32 EPL).
template <int EPL>
__global__ void attention_part_kernel(const float* q, StepDev step, int heads, KVLayer kv,
                                      float scale, int splits, float* partials) {
  __shared__ SoftmaxPart parts[kWarps];
  __shared__ float sums[kWarps][kMaxHeadDim];
  const int h = blockIdx.x, r = blockIdx.y, s = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, hd = kv.head_dim;
  const int bs = kv.block_size, kh = h / (heads / kv.n_kv_heads);
  int begin, end;
  split_range(step.pos[r] + 1, splits, s, &begin, &end);
  float qv[EPL], acc[EPL];
#pragma unroll
  for (int i = 0; i < EPL; ++i) {
    const int d = lane + 32 * i;
    qv[i] = d < hd ? q[(int64_t(r) * heads + h) * hd + d] * scale : 0.f;
    acc[i] = 0.f;
  }
  SoftmaxPart mine = {neg_inf(), 0.f};
  const int32_t* table = step.blocks + step.table[r];
  for (int p = begin + warp; p < end; p += kWarps) {
    const int64_t at = kv_index(table[p / bs], kh, kv.n_kv_heads, p % bs, bs, hd);
    float x[EPL];
    load_row<EPL>(kv.k, at, kv.type, lane, hd, x);
    float dot = 0.f;
#pragma unroll
    for (int i = 0; i < EPL; ++i) dot += qv[i] * x[i];
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
    float f_old, f_new;
    merge_factors(mine, {dot, 1.f}, &f_old, &f_new, &mine);
    load_row<EPL>(kv.v, at, kv.type, lane, hd, x);
#pragma unroll
    for (int i = 0; i < EPL; ++i) acc[i] = acc[i] * f_old + f_new * x[i];
  }
  if (lane == 0) parts[warp] = mine;
#pragma unroll
  for (int i = 0; i < EPL; ++i)
    if (lane + 32 * i < hd) sums[warp][lane + 32 * i] = acc[i];
  __syncthreads();
  float* out = partials + ((int64_t(r) * heads + h) * splits + s) * (hd + 2);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    SoftmaxPart all = parts[0];
    float a = sums[0][d];
    for (int w = 1; w < kWarps; ++w) {
      float fa, fb;
      merge_factors(all, parts[w], &fa, &fb, &all);
      a = a * fa + sums[w][d] * fb;
    }
    out[d] = a;
    if (d == 0) out[hd] = all.m, out[hd + 1] = all.l;
  }
}

__global__ void attention_merge_kernel(const float* partials, int heads, int hd, int splits,
                                       float* out) {
  const int h = blockIdx.x, r = blockIdx.y;
  const float* p = partials + (int64_t(r) * heads + h) * splits * (hd + 2);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    SoftmaxPart all = {p[hd], p[hd + 1]};
    float a = p[d];
    for (int s = 1; s < splits; ++s) {
      const float* q = p + int64_t(s) * (hd + 2);
      float fa, fb;
      merge_factors(all, {q[hd], q[hd + 1]}, &fa, &fb, &all);
      a = a * fa + q[d] * fb;
    }
    out[(int64_t(r) * heads + h) * hd + d] = all.l > 0.f ? a / all.l : 0.f;
  }
}

template <int EPL>
void launch_parts(const float* q, const StepDev& step, int rows, int heads, const KVLayer& kv,
                  float scale, int splits, float* partials, cudaStream_t s) {
  const dim3 grid{unsigned(heads), unsigned(rows), unsigned(splits)};
  HEARTH_LAUNCH(grid, 32 * kWarps, s, attention_part_kernel<EPL>)
  (q, step, heads, kv, scale, splits, partials);
}

}  // namespace

void attention(const float* q, const StepDev& step, int rows, int heads, const KVLayer& kv,
               float scale, int splits, float* partials, float* out, cudaStream_t s) {
  if (kv.head_dim > kMaxHeadDim) fail("CUDA attention: head_dim over ", kMaxHeadDim);
  const int epl = (kv.head_dim + 31) / 32;
  if (epl == 1)
    launch_parts<1>(q, step, rows, heads, kv, scale, splits, partials, s);
  else if (epl == 2)
    launch_parts<2>(q, step, rows, heads, kv, scale, splits, partials, s);
  else if (epl <= 4)
    launch_parts<4>(q, step, rows, heads, kv, scale, splits, partials, s);
  else
    launch_parts<8>(q, step, rows, heads, kv, scale, splits, partials, s);
  launched("attention");
  const int threads = kv.head_dim < 32 ? 32 : kv.head_dim;
  HEARTH_LAUNCH(dim3(unsigned(heads), unsigned(rows)), threads, s, attention_merge_kernel)
  (partials, heads, kv.head_dim, splits, out);
  launched("attention_merge");
}

}  // namespace hearth::HEARTH_CUDA_NS
