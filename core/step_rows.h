// What a GPU backend copies to its device each step: the per-row integers, the RoPE angles and the
// block tables of a StepInputs, laid out as both GPU backends' kernels read them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/graph.h"

namespace hearth {

// The one RoPE all Rope nodes of g share: theta^(-2i / head_dim) for i < head_dim / 2 (empty when
// g has none). Throws when two Rope nodes differ.
std::vector<double> rope_frequencies(const Graph& g);

// Block-table entries of all the step's sequences together.
size_t step_block_entries(const StepInputs& in);

// ints: tokens [0, T), positions [T, 2T), where each row's block table starts in `blocks`
// [2T, 3T), then the n_out output rows; rope: per row, inv_freq.size() pairs (cos, sin) of
// position * inv_freq[i], computed in double; blocks: every sequence's table, one after another.
// T is the compiled graph's max tokens.
void fill_step_rows(const StepInputs& in, int T, const std::vector<double>& inv_freq,
                    uint32_t* ints, float* rope, uint32_t* blocks);

}  // namespace hearth
