#include "core/runner.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "core/error.h"

namespace hearth {

namespace {
// First index of the largest value, NaN ignored; -1 if nothing is above -inf.
int32_t first_argmax(const float* x, int n) {
  float best = -std::numeric_limits<float>::infinity();
  int32_t arg = -1;
  for (int i = 0; i < n; ++i)
    if (x[i] > best) best = x[i], arg = i;
  return arg;
}
}  // namespace

Runner::Runner(std::unique_ptr<Backend> backend, const Graph& graph, int vocab_size,
               int max_positions, int prefill_chunk)
    : backend_(std::move(backend)),
      graph_(graph),
      vocab_(vocab_size),
      max_pos_(max_positions),
      chunk_(std::max(1, prefill_chunk)) {
  rows_.resize(size_t(chunk_));
  std::iota(rows_.begin(), rows_.end(), 0);
  for (const Node& n : graph_.nodes())
    if (!backend_->supports_op(graph_, n))
      fail("backend ", backend_->name(), " does not support op ", op_name(n.op));
}

std::unique_ptr<KVCache> Runner::new_kv(int capacity) {
  if (capacity <= 0) fail("KV cache capacity must be positive");
  if (capacity > max_pos_)
    fail("context of ", capacity, " tokens exceeds max_position_embeddings (", max_pos_, ")");
  return backend_->alloc_kv(graph_.kv, capacity);
}

std::unique_ptr<KVCache> Runner::grow_kv(const KVCache& old, int n, int capacity) {
  auto kv = new_kv(capacity);
  backend_->copy_kv(old, *kv, n);
  return kv;
}

CompiledGraph& Runner::compiled_for(int n_tokens, int n_out) {
  if (n_tokens == 1) {
    if (!decode_) decode_ = backend_->compile(graph_, 1, 1);
    return *decode_;
  }
  // Generation needs one row of logits per prefill; only `logits`-style callers want them all,
  // and a graph compiled for chunk-many output rows costs ~chunk x vocab floats of scratch.
  if (n_out <= 1) {
    if (!prefill_) prefill_ = backend_->compile(graph_, chunk_, 1);
    return *prefill_;
  }
  if (!prefill_all_) prefill_all_ = backend_->compile(graph_, chunk_, chunk_);
  return *prefill_all_;
}

void Runner::forward(KVCache& kv, const int32_t* tokens, int n, int pos0, float* all_logits,
                     float* last_logits, int chunk) {
  run_chunks(kv, tokens, n, pos0, all_logits, last_logits, nullptr, chunk);
}

int32_t Runner::forward_argmax(KVCache& kv, const int32_t* tokens, int n, int pos0, int chunk) {
  int32_t arg = -1;
  run_chunks(kv, tokens, n, pos0, nullptr, nullptr, &arg, chunk);
  return arg;
}

void Runner::run_chunks(KVCache& kv, const int32_t* tokens, int n, int pos0, float* all_logits,
                        float* last_logits, int32_t* argmax, int chunk) {
  if (n <= 0) fail("no tokens to run");
  for (int i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab_)
      fail("token id ", tokens[i], " is out of range (vocab_size ", vocab_, ")");
  if (pos0 + n > kv.capacity)
    fail("context of ", pos0 + n, " tokens exceeds the KV cache (", kv.capacity, ")");
  chunk = chunk > 0 ? std::min(chunk, chunk_) : chunk_;
  for (int done = 0; done < n;) {
    const int m = std::min(chunk, n - done);
    const bool last_chunk = done + m == n;
    StepInputs in;
    in.tokens = tokens + done;
    in.n_tokens = m;
    in.pos0 = pos0 + done;
    in.kv = &kv;
    int32_t last_row = m - 1;
    if (all_logits) {
      in.out_rows = rows_.data();
      in.n_out = m;
      in.logits = all_logits + size_t(done) * size_t(vocab_);
    } else if (last_chunk) {
      in.out_rows = &last_row;
      in.n_out = 1;
      in.logits = last_logits;
    }
    CompiledGraph& cg = compiled_for(m, in.n_out);
    if (argmax && last_chunk) {
      if (cg.argmax_fused) {
        in.argmax = argmax;
      } else {
        argmax_logits_.resize(size_t(vocab_));
        in.logits = argmax_logits_.data();
      }
    }
    backend_->run(cg, in);
    if (argmax && last_chunk && !cg.argmax_fused) *argmax = first_argmax(in.logits, vocab_);
    done += m;
  }
}

}  // namespace hearth
