// The sampler's top-k on the device: logits f32 [rows, cols] row-major in, per row the entries of
// core/gpu_readback.h out (kGpuTopKWords words: a count, then (index, value bits) pairs); a block
// per row finds the k-th largest key by a radix select over its four bytes, then keeps every logit
// at or above it.
#include "backends/cuda/cu_check.h"
#include "backends/cuda/cu_kernels.h"
#include "core/gpu_readback.h"

namespace hearth::HEARTH_CUDA_NS {

namespace {

constexpr int kTopKThreads = 1024;

// The key of the k-th largest logit of row: four passes, each counting the next byte of the keys
// that match the bytes fixed so far.
__device__ uint32_t kth_key(const float* row, int64_t cols, uint32_t k, uint32_t* hist,
                            uint32_t* prefix, uint32_t* need) {
  if (threadIdx.x == 0) *prefix = 0u, *need = k < cols ? k : uint32_t(cols);
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int d = threadIdx.x; d < 256; d += blockDim.x) hist[d] = 0u;
    __syncthreads();  // hist cleared, *prefix as the last pass (or the start) left it
    const uint32_t high = shift == 24 ? 0u : ~0u << (shift + 8), fixed = *prefix;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const uint32_t key = top_k_key(row[c]);
      if ((key & high) == fixed) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();  // every key counted
    if (threadIdx.x == 0) *prefix |= uint32_t(radix_pick(hist, need)) << shift;
    __syncthreads();  // the digit is fixed before anyone reads *prefix or clears hist
  }
  return *prefix;
}

__global__ void __launch_bounds__(kTopKThreads)
    top_k_kernel(const float* logits, int64_t cols, const uint32_t* ks, uint32_t* entries) {
  __shared__ uint32_t hist[256];
  __shared__ uint32_t prefix, need, count;
  const uint32_t k = ks[blockIdx.x];
  if (k == 0u) return;  // the host reads this row whole (k is the same for the whole block)
  const float* row = logits + int64_t(blockIdx.x) * cols;
  uint32_t* e = entries + int64_t(blockIdx.x) * kGpuTopKWords;
  if (threadIdx.x == 0) count = 0u;
  const uint32_t t = kth_key(row, cols, k, hist, &prefix, &need);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = row[c];
    if (top_k_key(v) < t) continue;
    const uint32_t slot = atomicAdd(&count, 1u);
    if (slot < uint32_t(kGpuTopKCap))
      e[1 + 2 * slot] = uint32_t(c), e[2 + 2 * slot] = bits_of_f32(v);
  }
  __syncthreads();
  if (threadIdx.x == 0) e[0] = count;
}

}  // namespace

void top_k(const float* logits, int rows, int64_t cols, const uint32_t* ks, uint32_t* entries,
           cudaStream_t s) {
  HEARTH_LAUNCH(rows, kTopKThreads, s, top_k_kernel)(logits, cols, ks, entries);
  launched("top_k");
}

}  // namespace hearth::HEARTH_CUDA_NS
