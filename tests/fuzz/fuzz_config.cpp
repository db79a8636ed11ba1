// Feeds the input, split at its first NUL byte, as config.json text to parse_qwen3_config and as
// generation_config.json text to parse_generation_config (with the config just read, or a default
// one when it was refused). An accepted config must hold the positive sizes the model builds on.
#include <cstdint>

#include "core/error.h"
#include "models/qwen3_config.h"
#include "tests/fuzz/fuzz_util.h"

using namespace hearth;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = fuzz::split_nul(data, size, 2);
  Qwen3Config config;
  try {
    config = parse_qwen3_config(parts[0], "config.json");
    FUZZ_CHECK(config.hidden_size > 0 && config.intermediate_size > 0);
    FUZZ_CHECK(config.num_hidden_layers > 0 && config.num_attention_heads > 0);
    FUZZ_CHECK(config.num_key_value_heads > 0 && config.head_dim > 0 && config.vocab_size > 0);
    FUZZ_CHECK(config.config_hash.size() == 16);
  } catch (const Error& e) {
    fuzz::refused(e);
    config = Qwen3Config{};
  }
  try {
    GenerationConfig g = parse_generation_config(parts[1], "generation_config.json", config);
    if (g.top_k) FUZZ_CHECK(*g.top_k >= 0);
  } catch (const Error& e) {
    fuzz::refused(e);
  }
  return 0;
}
