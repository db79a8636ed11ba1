// Binds a checkpoint's tensors to the Qwen3 layout by their exact Hugging Face names, checking
// every shape and dtype. The tensors are views into the checkpoint's maps: no weight is copied.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "models/checkpoint.h"
#include "models/qwen3_config.h"

namespace hearth {

struct Qwen3LayerWeights {
  Tensor q_proj, k_proj, v_proj, o_proj, q_norm, k_norm, gate_proj, up_proj, down_proj, input_norm,
      post_attn_norm;
  // A sparse (MoE) layer has these instead of gate/up/down_proj: the router mlp.gate
  // [num_experts, hidden] and each expert's gate/up [moe_intermediate, hidden], down [hidden,
  // moe_intermediate].
  Tensor router;
  std::vector<Tensor> expert_gate, expert_up, expert_down;
  bool sparse() const { return !expert_gate.empty(); }
};

struct Qwen3Weights {
  Tensor embed, final_norm, lm_head;  // lm_head aliases embed when embeddings are tied
  std::vector<Qwen3LayerWeights> layers;
  // Keeps the mapped files alive, so the views stay valid even after the Checkpoint is gone.
  std::vector<std::shared_ptr<SafetensorsFile>> files;
  // A quantized checkpoint's 4-bit codebook, which its Q4 views point into (or null).
  std::shared_ptr<const std::array<int8_t, 16>> codebook;
};

// Throws hearth::Error naming the tensor at fault: missing, unexpected, wrong shape, unsupported
// dtype (F32, F16 and BF16 are accepted, mixed freely), or an lm_head.weight that contradicts
// tie_word_embeddings. Reads weight data only to compare a tied lm_head.weight with the embedding.
Qwen3Weights bind_qwen3_weights(const Checkpoint& ckpt, const Qwen3Config& config);

}  // namespace hearth
