// Qwen3 model and generation settings from a Hugging Face checkpoint folder. Anything hearth does
// not implement (rope scaling, sliding windows, biases, other activations) is refused up front, so
// an unsupported model fails with a message instead of producing wrong text.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace hearth {

struct Qwen3Config {
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;
  int vocab_size = 0;
  int max_position_embeddings = 0;
  double rope_theta = 0;
  double rms_norm_eps = 0;
  bool tie_word_embeddings = false;
  std::string torch_dtype;             // "bfloat16", ...; empty when absent
  std::vector<int32_t> eos_token_ids;  // empty when absent or null
  std::optional<int32_t> bos_token_id;
  // Qwen3-MoE (model_type "qwen3_moe"; num_experts 0 for dense Qwen3): layer i is sparse when i
  // is not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0; a sparse layer's MLP is
  // num_experts experts of moe_intermediate_size, num_experts_per_tok of them per token, their
  // router probabilities renormalised to sum 1 when norm_topk_prob.
  int num_experts = 0;
  int num_experts_per_tok = 0;
  int moe_intermediate_size = 0;
  bool norm_topk_prob = false;
  int decoder_sparse_step = 1;
  std::vector<int> mlp_only_layers;
  bool is_moe() const { return num_experts > 0; }
  bool sparse_layer(int i) const;
  // config.json has the "hearth_standin" object `hearth standin` writes: the weights are noise.
  bool random_weights = false;
  bool has_quantization_config = false;
  std::string quantization_config_json;  // minified JSON text, when has_quantization_config
  std::string config_hash;  // FNV-1a 64 of config.json's bytes, 16 lowercase hex digits
  std::string source;       // path it was read from, for messages
};

// Reads DIR/config.json. Throws hearth::Error naming the file and the field at fault.
Qwen3Config load_qwen3_config(const std::string& dir);
// Same, from JSON text; SOURCE is used in messages only.
Qwen3Config parse_qwen3_config(const std::string& json, const std::string& source);

struct GenerationConfig {
  std::vector<int32_t> eos_token_ids;
  std::optional<int32_t> bos_token_id;
  std::optional<double> temperature;
  std::optional<int> top_k;
  std::optional<double> top_p;
  std::optional<double> min_p;
  std::optional<double> repetition_penalty;
  std::optional<bool> do_sample;
};

// Reads DIR/generation_config.json if present; EOS ids missing there come from CONFIG.
GenerationConfig load_generation_config(const std::string& dir, const Qwen3Config& config);
GenerationConfig parse_generation_config(const std::string& json, const std::string& source,
                                         const Qwen3Config& config);

std::string fnv1a64_hex(const void* data, size_t n);

}  // namespace hearth
