// What a GPU step reads back: all logits, the argmax, or the sampler's top-k (StepInputs::top_k).
// For the top-k the device writes, per output row, entries instead of the logits: a count and then
// (index, value bits) pairs for every logit at or above the row's k-th largest, ties included and
// in no order, ranking NaN as -inf and -0 as +0 as the sampler does; the host rebuilds the row with
// -inf elsewhere, reading 2 KiB instead of the vocabulary's 600 KB.
#pragma once
#include <cstdint>

namespace hearth {

struct StepInputs;

enum class GpuReadback { Logits, Argmax, TopK };

// Pairs an output row's entries hold; a row whose count exceeds it (more ties at the k-th largest
// than fit) is read whole, as is a row whose k the device does not serve.
constexpr int kGpuTopKCap = 256;
constexpr int kGpuTopKWords = 1 + 2 * kGpuTopKCap;

// What `in` asks for, and in k[0, n_out) the k the device computes for each output row (0: none,
// the row is read whole): k when the sampler needs only its k largest and k <= kGpuTopKCap. TopK
// when logits are wanted and some row has a k.
GpuReadback gpu_readback(const StepInputs& in, uint32_t* k);

// Writes the vocab logits of a row from its entries: the kept values bit for bit, -inf elsewhere.
// Returns false, leaving row untouched, when the entries overflowed (or name an index past vocab).
bool expand_gpu_top_k(const uint32_t* entries, int64_t vocab, float* row);

}  // namespace hearth
