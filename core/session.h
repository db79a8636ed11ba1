// A session is one conversation's state: the KV cache and the tokens it holds. generate() takes
// the whole prompt each time and prefills only what the cache does not hold yet, which is what
// makes multi-turn chat cost only the new turn.
#pragma once
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/runner.h"
#include "core/sampler.h"

namespace hearth {

struct GenerateOptions {
  int max_new_tokens = 128;
  SamplingParams sampling;
  std::vector<int32_t> stop_ids;  // generation ends after emitting one of these
  bool ignore_eos = false;        // keep going past stop ids (benchmarks, golden tests)
};

struct GenerationMetrics {
  int prompt_tokens = 0;   // tokens in the prompt
  int prefill_tokens = 0;  // of those, how many had to be computed (the rest came from the cache)
  int new_tokens = 0;
  double prefill_ms = 0;    // prompt processing
  double ttft_ms = 0;       // request start to first token sampled
  double decode_ms = 0;     // first token to last
  double ms_per_token = 0;  // decode_ms / (new_tokens - 1)
  double tokens_per_s = 0;  // decode speed
  double prefill_tokens_per_s = 0;
};

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated ids, including the stop id when one ended it
  std::string finish_reason;    // "stop", "length" or "cancelled"
  GenerationMetrics metrics;
};

class Session {
 public:
  explicit Session(Runner& runner);

  // on_token is called with each new token as it is sampled; returning false stops generation
  // (finish reason "stop"). cancel, when set from any thread, stops it within one decode step.
  GenerationResult generate(const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                            const std::function<bool(int32_t)>& on_token = nullptr,
                            const std::atomic<bool>* cancel = nullptr);

  void reset();
  // Tokens whose keys and values are in the cache, oldest first.
  const std::vector<int32_t>& cached_tokens() const { return cached_; }
  size_t kv_bytes() const { return kv_ ? kv_->bytes() : 0; }

 private:
  void ensure_capacity(int needed, int keep);

  Runner& runner_;
  std::unique_ptr<KVCache> kv_;
  std::vector<int32_t> cached_;
  std::vector<float> logits_;
};

}  // namespace hearth
