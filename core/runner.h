// The engine of one loaded model: its backend (thread pool, weights placed once), the graph
// compiled for a few step sizes, and the model's paged KV cache (KVPool bookkeeping over the
// backend's KVStorage). Every session, the scheduler and the tools run steps through it; a step
// holds rows of one or many sequences. Steps run one at a time (an internal lock), so any thread
// may call step() or forward().
#pragma once
#include <memory>
#include <mutex>
#include <vector>

#include "core/backend.h"
#include "core/kv_pool.h"

namespace hearth {

struct RunnerOptions {
  int prefill_chunk = 256;  // most tokens (rows) in one step
  int max_seqs = 16;        // most sequences, and rows of logits, in one batched step
  int block_size = 32;      // positions per KV block
  // Bytes of KV memory; 0: the model's whole context once (max_positions positions).
  size_t kv_budget_bytes = 0;
};

// One sequence's KV blocks for direct use of the runner (forward): private blocks taken from the
// pool as positions are first written, given back when the cache is destroyed. `capacity` bounds
// the positions it may hold.
struct KVCache {
  KVCache(KVPool& pool, int capacity, size_t position_bytes);
  ~KVCache();
  KVCache(const KVCache&) = delete;
  KVCache& operator=(const KVCache&) = delete;
  // Blocks to cover positions [0, n); throws when the pool has none left.
  void reserve(int n);
  size_t bytes() const { return blocks.size() * size_t(pool.block_size()) * position_bytes; }

  KVPool& pool;
  int capacity;
  size_t position_bytes;
  std::vector<int32_t> blocks;
};

// The positions a sequence may use by default: max_positions, or fewer where the backend's KVRoom
// for `g` would not hold that many in `kv_dtype` (then a multiple of 256, or of 16 below 256).
// Throws, saying so, where not even 16 positions fit.
int fitting_positions(const Backend& backend, const Graph& g, int max_positions);

class Runner {
 public:
  // The graph must outlive the runner. vocab_size bounds token ids; max_positions bounds sequences.
  Runner(std::unique_ptr<Backend> backend, const Graph& graph, int vocab_size, int max_positions,
         const RunnerOptions& opt = {});
  Runner(std::unique_ptr<Backend> backend, const Graph& graph, int vocab_size, int max_positions,
         int prefill_chunk);

  Backend& backend() { return *backend_; }
  const Graph& graph() const { return graph_; }
  int vocab_size() const { return vocab_; }
  int max_positions() const { return max_pos_; }
  int prefill_chunk() const { return opt_.prefill_chunk; }
  int max_seqs() const { return opt_.max_seqs; }
  KVPool& kv_pool() { return *pool_; }
  size_t kv_position_bytes() const { return KVStorage::position_bytes(graph_.kv, kv_->dtype); }

  // One step over the rows of in.seqs (in.kv is the runner's). Checks token ids, row coverage,
  // positions and block tables before anything runs; logits or argmax as StepInputs says.
  // Greedy callers pass argmax; when the backend cannot fuse it, the runner reduces the logits.
  void step(StepInputs in);
  // Compiles the one-token (decode) step now, so that the backend's once-per-model work (weight
  // copies and the LM head's screen, device uploads) happens during a load rather than in the
  // first reply.
  void prepare();

  // Copies KV block `from` into `to` (a private copy of a shared block to write into).
  void copy_kv_block(int from, int to);

  // A private cache for `capacity` positions; refuses more than max_position_embeddings.
  std::unique_ptr<KVCache> new_kv(int capacity);
  // Feeds tokens[0..n) at positions pos0.. through the cache in chunks of at most `chunk` tokens
  // (0: the runner's prefill chunk). Writes logits for every position into `all_logits`
  // ([n, vocab]) when given, else only the last position's into `last_logits` ([vocab]).
  void forward(KVCache& kv, const int32_t* tokens, int n, int pos0, float* all_logits,
               float* last_logits, int chunk = 0);
  // Greedy decoding: the same, but returns only the index of the last position's largest logit
  // (first index on ties, NaN ignored; -1 if none is above -inf).
  int32_t forward_argmax(KVCache& kv, const int32_t* tokens, int n, int pos0, int chunk = 0);

 private:
  CompiledGraph& compiled_for(int n_tokens, int n_out);
  void check(const StepInputs& in) const;
  void run_chunks(KVCache& kv, const int32_t* tokens, int n, int pos0, float* all_logits,
                  float* last_logits, int32_t* argmax, int chunk);

  std::unique_ptr<Backend> backend_;
  const Graph& graph_;
  int vocab_, max_pos_;
  RunnerOptions opt_;
  std::unique_ptr<KVStorage> kv_;
  std::unique_ptr<KVPool> pool_;
  std::mutex mu_;  // one step at a time: compiled graphs hold the step's activations
  // Compiled graphs by (token bucket, output bucket); a step takes the smallest that fits.
  std::vector<std::pair<std::pair<int, int>, std::unique_ptr<CompiledGraph>>> compiled_;
  std::vector<int32_t> rows_;         // 0..chunk-1, the out_rows of an all-logits step
  std::vector<float> argmax_logits_;  // for backends that cannot fuse the argmax
};

}  // namespace hearth
