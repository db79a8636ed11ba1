// What both GPU backends (Vulkan, CUDA) run: Qwen3's dense graph with F32, F16 or BF16 weights
// (and hearth's Q8/Q4 in matmuls and embeddings, as quant/FORMAT.md lays them out), head_dim up to
// 256, and f32, f16 or bf16 KV caches; not Qwen3-MoE yet.
#pragma once
#include <cstddef>
#include <string>

#include "core/graph.h"

namespace hearth {

bool gpu_supports_op(const Graph& g, const Node& n);
// Throws, naming `backend`, the first node of g it does not run, or step sizes past 65535 (what
// a GPU backend's grids and tables are sized for).
class Backend;
void check_gpu_graph(const Backend& be, const Graph& g, const std::string& backend, int max_tokens,
                     int max_outputs);
// Throws, naming `backend`, unless kv is a KV type the GPU backends keep.
void check_gpu_kv_dtype(DType kv, const std::string& backend);

// Whether a GPU backend's decode matmuls may multiply w on int8 activations (Vulkan's integer
// dot products, CUDA's dp4a): Q8 and Q4 on the uniform grid (a codebook's levels are not).
bool gpu_int8_dot_weight(const Tensor& w);

// Decode attention splits each (row, query head)'s positions over this many parts (flash-decoding,
// at least 32 positions a part, a second pass merging them), so that a step of few rows still
// fills a large GPU with about 4096 workgroups; 1 for long steps (prefill).
int gpu_attention_splits(int n_tokens, int heads);
// Floats of the partial softmaxes ([rows][heads][splits][head_dim + 2]) of the largest step of up
// to max_tokens rows.
size_t gpu_attention_partials(int max_tokens, int heads, int head_dim);

// The KV room on a device of `device_bytes` for g (Backend::kv_room): what its weights leave, less
// an eighth for activations and the driver, each layer in one buffer of at most layer_bytes.
struct KVRoom;
KVRoom gpu_kv_room(const Graph& g, size_t device_bytes, size_t layer_bytes);
}  // namespace hearth
