#include "core/gpu_readback.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/graph.h"

namespace hearth {

GpuReadback gpu_readback(const StepInputs& in, uint32_t* k) {
  bool any = false;
  for (int i = 0; i < in.n_out; ++i) {
    const int32_t want = in.top_k && !in.argmax ? in.top_k[i] : 0;
    k[i] = want >= 1 && want <= kGpuTopKCap ? uint32_t(want) : 0u;
    any |= k[i] != 0;
  }
  if (in.argmax) return GpuReadback::Argmax;
  return any && in.logits ? GpuReadback::TopK : GpuReadback::Logits;
}

bool expand_gpu_top_k(const uint32_t* entries, int64_t vocab, float* row) {
  const uint32_t count = entries[0];
  if (count > uint32_t(kGpuTopKCap)) return false;
  for (uint32_t i = 0; i < count; ++i)
    if (entries[1 + 2 * i] >= uint64_t(vocab)) return false;
  std::fill(row, row + vocab, -std::numeric_limits<float>::infinity());
  for (uint32_t i = 0; i < count; ++i)
    std::memcpy(&row[entries[1 + 2 * i]], &entries[2 + 2 * i], 4);
  return true;
}

}  // namespace hearth
