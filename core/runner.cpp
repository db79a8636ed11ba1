#include "core/runner.h"

#include <algorithm>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "core/sampler.h"

namespace hearth {

int fitting_positions(const Backend& backend, const Graph& g, int max_positions) {
  const KVRoom room = backend.kv_room(g);
  const size_t all_layers = KVStorage::position_bytes(g.kv, backend.kv_dtype());
  const size_t one_layer = all_layers / size_t(std::max(1, 2 * g.kv.n_layers));
  size_t fit = size_t(max_positions);
  if (room.total_bytes) fit = std::min(fit, room.total_bytes / std::max<size_t>(all_layers, 1));
  fit = std::min(fit, room.layer_bytes / std::max<size_t>(one_layer, 1));
  if (fit >= size_t(max_positions)) return max_positions;
  if (fit < 16)
    fail("the ", backend.name(), " backend has room for the KV cache of only ", fit,
         " positions of this model (", all_layers, " bytes each)");
  return int(fit >= 256 ? fit / 256 * 256 : fit / 16 * 16);
}

KVCache::KVCache(KVPool& p, int cap, size_t pos_bytes)
    : pool(p), capacity(cap), position_bytes(pos_bytes) {}

KVCache::~KVCache() {
  for (int32_t b : blocks) pool.release(b);
}

void KVCache::reserve(int n) {
  const int need = (n + pool.block_size() - 1) / pool.block_size();
  while (int(blocks.size()) < need) {
    const int b = pool.alloc(blocks.empty() ? -1 : blocks.back());
    if (b < 0)
      fail("the KV cache budget (", pool.n_blocks(), " blocks of ", pool.block_size(),
           " positions) is used up: ", n, " positions do not fit beside the other sequences");
    blocks.push_back(b);
  }
}

Runner::Runner(std::unique_ptr<Backend> backend, const Graph& graph, int vocab_size,
               int max_positions, int prefill_chunk)
    : Runner(std::move(backend), graph, vocab_size, max_positions, [&] {
        RunnerOptions o;
        o.prefill_chunk = prefill_chunk;
        return o;
      }()) {}

Runner::Runner(std::unique_ptr<Backend> backend, const Graph& graph, int vocab_size,
               int max_positions, const RunnerOptions& opt)
    : backend_(std::move(backend)),
      graph_(graph),
      vocab_(vocab_size),
      max_pos_(max_positions),
      opt_(opt) {
  opt_.prefill_chunk = std::max(1, opt_.prefill_chunk);
  opt_.max_seqs = std::max(1, std::min(opt_.max_seqs, opt_.prefill_chunk));
  if (opt_.block_size <= 0 || opt_.block_size > 4096)
    fail("KV block size must be in [1, 4096] (got ", opt_.block_size, ")");
  rows_.resize(size_t(opt_.prefill_chunk));
  std::iota(rows_.begin(), rows_.end(), 0);
  for (const Node& n : graph_.nodes())
    if (!backend_->supports_op(graph_, n))
      fail("backend ", backend_->name(), " does not support op ", op_name(n.op));
  backend_->expect(graph_);
  const size_t per_block =
      KVStorage::position_bytes(graph_.kv, backend_->kv_dtype()) * size_t(opt_.block_size);
  const size_t budget =
      opt_.kv_budget_bytes ? opt_.kv_budget_bytes
                           : per_block * size_t((max_pos_ + opt_.block_size - 1) / opt_.block_size);
  const size_t n_blocks = budget / std::max<size_t>(per_block, 1);
  if (n_blocks < 1)
    fail("the KV budget of ", budget >> 20, " MiB holds no block of ", opt_.block_size,
         " positions (", per_block >> 20, " MiB each)");
  if (n_blocks > size_t(std::numeric_limits<int32_t>::max() / 2))
    fail("the KV budget of ", budget >> 20, " MiB is too large");
  kv_ = backend_->alloc_kv(graph_.kv, int(n_blocks), opt_.block_size);
  pool_ = std::make_unique<KVPool>(int(n_blocks), opt_.block_size, kv_->extent_blocks);
}

std::unique_ptr<KVCache> Runner::new_kv(int capacity) {
  if (capacity <= 0) fail("KV cache capacity must be positive");
  if (capacity > max_pos_)
    fail("context of ", capacity, " tokens exceeds max_position_embeddings (", max_pos_, ")");
  return std::make_unique<KVCache>(*pool_, capacity, kv_position_bytes());
}

CompiledGraph& Runner::compiled_for(int n_tokens, int n_out) {
  // Decode of one sequence, batched decode (one row per sequence), prefill chunks; one row of
  // logits per sequence, or a whole chunk's for `logits`-style callers (chunk x vocab floats).
  auto bucket = [&](int n) {
    return n <= 1 ? 1 : n <= opt_.max_seqs ? opt_.max_seqs : opt_.prefill_chunk;
  };
  const int t = bucket(n_tokens);
  const int o = std::min(t, bucket(n_out));
  for (auto& [key, cg] : compiled_)
    if (key.first == t && key.second == o) return *cg;
  compiled_.emplace_back(std::make_pair(t, o), backend_->compile(graph_, t, o));
  return *compiled_.back().second;
}

void Runner::check(const StepInputs& in) const {
  if (in.n_tokens <= 0) fail("no tokens to run");
  if (in.n_tokens > opt_.prefill_chunk)
    fail("a step of ", in.n_tokens, " tokens exceeds the runner's ", opt_.prefill_chunk);
  if (in.n_out < 0 || in.n_out > std::max(opt_.max_seqs, in.n_tokens))
    fail("a step asks for ", in.n_out, " rows of logits");
  for (int i = 0; i < in.n_tokens; ++i)
    if (in.tokens[i] < 0 || in.tokens[i] >= vocab_)
      fail("token id ", in.tokens[i], " is out of range (vocab_size ", vocab_, ")");
  for (int i = 0; i < in.n_out; ++i)
    if (in.out_rows[i] < 0 || in.out_rows[i] >= in.n_tokens)
      fail("logits asked for row ", in.out_rows[i], " of a ", in.n_tokens, "-row step");
  int row = 0;
  const int bs = pool_->block_size();
  for (int s = 0; s < in.n_seqs; ++s) {
    const SeqRows& q = in.seqs[s];
    if (q.row0 != row || q.n_rows <= 0) fail("step: sequence ", s, " does not start at row ", row);
    row += q.n_rows;
    const int end = q.pos0 + q.n_rows;
    if (q.pos0 < 0 || end > max_pos_)
      fail("context of ", end, " tokens exceeds max_position_embeddings (", max_pos_, ")");
    if (int64_t(q.n_blocks) * bs < end)
      fail("context of ", end, " tokens exceeds the sequence's KV blocks (",
           int64_t(q.n_blocks) * bs, " positions)");
    for (int b = 0; b < q.n_blocks; ++b)
      if (q.blocks[b] < 0 || q.blocks[b] >= pool_->n_blocks())
        fail("step: sequence ", s, " names KV block ", q.blocks[b]);
  }
  if (row != in.n_tokens) fail("step: its sequences cover ", row, " of ", in.n_tokens, " rows");
}

void Runner::step(StepInputs in) {
  check(in);
  in.kv = kv_.get();
  std::lock_guard<std::mutex> lk(mu_);
  CompiledGraph& cg = compiled_for(in.n_tokens, in.n_out);
  int32_t* argmax = in.argmax;
  if (argmax && !cg.argmax_fused) {
    argmax_logits_.resize(size_t(in.n_out) * size_t(vocab_));
    in.logits = argmax_logits_.data();
    in.argmax = nullptr;
  }
  backend_->run(cg, in);
  if (argmax && !cg.argmax_fused)
    for (int i = 0; i < in.n_out; ++i)
      argmax[i] = first_argmax(in.logits + size_t(i) * size_t(vocab_), vocab_);
}

void Runner::prepare() {
  std::lock_guard<std::mutex> lk(mu_);
  compiled_for(1, 1);
}

void Runner::copy_kv_block(int from, int to) {
  std::lock_guard<std::mutex> lk(mu_);
  backend_->copy_kv_block(*kv_, from, to);
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
  if (pos0 < 0 || pos0 + n > kv.capacity)
    fail("context of ", pos0 + n, " tokens exceeds the KV cache (", kv.capacity, ")");
  kv.reserve(pos0 + n);
  chunk = chunk > 0 ? std::min(chunk, opt_.prefill_chunk) : opt_.prefill_chunk;
  for (int done = 0; done < n;) {
    const int m = std::min(chunk, n - done);
    const bool last_chunk = done + m == n;
    SeqRows seq;
    seq.n_rows = m;
    seq.pos0 = pos0 + done;
    seq.blocks = kv.blocks.data();
    seq.n_blocks = int(kv.blocks.size());
    StepInputs in;
    in.tokens = tokens + done;
    in.n_tokens = m;
    in.seqs = &seq;
    in.n_seqs = 1;
    int32_t last_row = m - 1;
    if (all_logits) {
      in.out_rows = rows_.data();
      in.n_out = m;
      in.logits = all_logits + size_t(done) * size_t(vocab_);
    } else if (last_chunk) {
      in.out_rows = &last_row;
      in.n_out = 1;
      in.logits = last_logits;
      if (argmax) in.argmax = argmax;
    }
    step(in);
    done += m;
  }
}

}  // namespace hearth
