// Stand-in checkpoints: Hugging Face Qwen3 checkpoints at true shapes with seeded random weights,
// for loading, speed and quantization work without downloading real weights. The weights are
// scaled so a forward pass stays finite and O(1) through every layer; heavy_tailed and
// outlier_channels imitate the statistics real LLM weights have and quantizers must survive.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hearth {

struct StandinSpec {
  std::string
      preset;  // "0.6b", "1.7b", "4b", "8b", "30b-a3b", "tiny", "moe-tiny", or "" for custom
  int hidden = 0, intermediate = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 128;
  int vocab = 151936;
  bool tied = true;
  double rope_theta = 1000000.0;
  double rms_eps = 1e-6;
  int max_position = 40960;
  std::string dtype = "BF16";  // BF16 | F16 | F32
  uint64_t seed = 1;
  // Student-t (4 degrees of freedom) weights instead of normal ones.
  bool heavy_tailed = false;
  // This many channels scaled up 8-20x (chosen from the seed) in each of: the hidden-size norms,
  // the input columns of q/k/v/gate/up, of o_proj and of down_proj, and the embedding's (= tied
  // lm_head's) columns. Along the hidden dimension the three sets are disjoint, so outliers do not
  // multiply into one another. Applies with or without heavy_tailed; at most hidden / 3.
  int outlier_channels = 0;
  // This many head_dim channels of every k_norm gain scaled up 8-20x: the keys' outlier channels
  // of real checkpoints, which an int8 KV cache must survive. At most head_dim / 4.
  int key_outlier_channels = 0;
  int shards = 1;
  // Qwen3-MoE (experts > 0): every layer sparse, experts of moe_intermediate each, top
  // experts_per_tok per token, their weights renormalised.
  int experts = 0, experts_per_tok = 0, moe_intermediate = 0;
};

// The architecture of a Qwen3 release (or "tiny"); throws hearth::Error listing the valid names.
StandinSpec standin_preset(const std::string& name);

// Writes dir/config.json, generation_config.json, model.safetensors (or
// model-0000K-of-0000N.safetensors and model.safetensors.index.json when shards > 1) and copies
// tokenizer.json and tokenizer_config.json from tokenizer_dir (skipped when tokenizer_dir is
// empty). Creates dir if needed. The bytes depend only on the spec, not on the thread count
// (threads: 0 = one per hardware thread). Holds one tensor in memory at a time.
void write_standin(const std::string& dir, const StandinSpec& spec,
                   const std::string& tokenizer_dir, int threads = 0);

// The stand-in's tensors one at a time, with the values write_standin writes, for writers that
// convert them as they come (hearth standin --bits: a quantized stand-in without its 16-bit one).
class StandinSource {
 public:
  explicit StandinSource(const StandinSpec& spec);  // throws on an invalid spec
  ~StandinSource();
  size_t size() const;  // tensors, in a fixed order
  const std::string& name(size_t i) const;
  const std::vector<int64_t>& shape(size_t i) const;
  const char* dtype() const;  // safetensors spelling of spec.dtype
  size_t nbytes(size_t i) const;
  // Writes tensor i (nbytes(i) bytes) at dst; threads 0: one per hardware thread.
  void fill(size_t i, uint8_t* dst, int threads = 0) const;

 private:
  friend void write_standin(const std::string&, const StandinSpec&, const std::string&, int);
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Throws unless tokenizer_dir (when not empty) holds tokenizer.json and tokenizer_config.json.
void check_standin_tokenizer(const std::string& tokenizer_dir);

// Everything of a stand-in but its weights: config.json, generation_config.json and the tokenizer
// files (from tokenizer_dir, unless empty). Creates dir if needed.
void write_standin_files(const std::string& dir, const StandinSpec& spec,
                         const std::string& tokenizer_dir);

}  // namespace hearth
