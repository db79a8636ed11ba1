// Runs a model graph on a backend: compiles it once for decode (one token) and once for prefill
// chunks, hands out KV caches, and checks token ids before they reach a kernel.
#pragma once
#include <memory>
#include <vector>

#include "core/backend.h"

namespace hearth {

class Runner {
 public:
  // The graph must outlive the runner. vocab_size bounds token ids; max_positions bounds caches.
  Runner(std::unique_ptr<Backend> backend, const Graph& graph, int vocab_size, int max_positions,
         int prefill_chunk = 256);

  Backend& backend() { return *backend_; }
  int vocab_size() const { return vocab_; }
  int max_positions() const { return max_pos_; }
  int prefill_chunk() const { return chunk_; }

  // A cache for `capacity` positions; refuses more than the model's max_position_embeddings.
  std::unique_ptr<KVCache> new_kv(int capacity);
  // A larger cache holding the first n positions of `old`.
  std::unique_ptr<KVCache> grow_kv(const KVCache& old, int n, int capacity);

  // Feeds tokens[0..n) at positions pos0.. through the cache in chunks of at most `chunk` tokens
  // (0: the runner's prefill chunk). Writes logits for every position into `all_logits`
  // ([n, vocab]) when given, else only the last position's into `last_logits` ([vocab]).
  void forward(KVCache& kv, const int32_t* tokens, int n, int pos0, float* all_logits,
               float* last_logits, int chunk = 0);
  // Greedy decoding: the same, but returns only the index of the last position's largest logit
  // (first index on ties, NaN ignored; -1 if none is above -inf). Backends that fuse the LM head
  // with the argmax never write the vocab-sized logits row.
  int32_t forward_argmax(KVCache& kv, const int32_t* tokens, int n, int pos0, int chunk = 0);

 private:
  CompiledGraph& compiled_for(int n_tokens, int n_out);
  void run_chunks(KVCache& kv, const int32_t* tokens, int n, int pos0, float* all_logits,
                  float* last_logits, int32_t* argmax, int chunk);

  std::unique_ptr<Backend> backend_;
  const Graph& graph_;
  int vocab_, max_pos_, chunk_;
  std::unique_ptr<CompiledGraph> decode_, prefill_, prefill_all_;
  std::vector<int32_t> rows_;         // 0..chunk-1, the out_rows of an all-logits step
  std::vector<float> argmax_logits_;  // for backends that cannot fuse the argmax
};

}  // namespace hearth
