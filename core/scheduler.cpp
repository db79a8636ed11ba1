#include "core/scheduler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace hearth {

namespace {
double ms_between(std::chrono::steady_clock::time_point a,
                  std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}
}  // namespace

struct Scheduler::Seq {
  Id id = 0;
  std::vector<int32_t> tokens;  // prompt, then generated
  int prompt_len = 0;
  int computed = 0;              // positions whose keys and values are in `blocks`
  std::vector<int32_t> blocks;   // block table
  std::vector<uint64_t> hashes;  // of the published prefix, one per full computed block
  GenerateOptions opt;
  std::unique_ptr<Sampler> sampler;  // null when greedy: the argmax is enough
  bool running = false, finished = false, ever_ran = false, taken = false;
  Id resume = 0;              // a parked sequence to take the blocks of, at admission
  std::string cancel_reason;  // set: end at the next step
  GenerationResult result;
  Clock::time_point submitted, first_token, last_token;
  int new_tokens() const { return int(tokens.size()) - prompt_len; }
};

Scheduler::Scheduler(Runner& runner, const SchedulerOptions& opt)
    : runner_(runner),
      pool_(runner.kv_pool()),
      max_batch_tokens_(opt.max_batch_tokens > 0
                            ? std::min(opt.max_batch_tokens, runner.prefill_chunk())
                            : runner.prefill_chunk()),
      max_seqs_(opt.max_seqs > 0 ? std::min(opt.max_seqs, runner.max_seqs()) : runner.max_seqs()) {
  logits_.reset(new float[size_t(max_seqs_) * size_t(runner.vocab_size())]);
}

Scheduler::~Scheduler() {
  for (auto& [id, s] : seqs_) release_blocks(*s);
}

Scheduler::Id Scheduler::submit(const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                                Id resume) {
  if (prompt.empty()) fail("the prompt is empty");
  if (opt.max_new_tokens < 0) fail("max new tokens must not be negative");
  const int V = runner_.vocab_size();
  for (int32_t t : prompt)
    if (t < 0 || t >= V) fail("token id ", t, " is out of range (vocab_size ", V, ")");
  const int64_t needed = int64_t(prompt.size()) + std::max(opt.max_new_tokens, 1);
  if (needed > runner_.max_positions())
    fail("prompt and max new tokens need ", needed, " positions but max_position_embeddings is ",
         runner_.max_positions());
  const int64_t blocks = (needed + pool_.block_size() - 1) / pool_.block_size();
  if (blocks > pool_.n_blocks())
    fail("prompt and max new tokens need ", needed, " positions but the KV budget holds ",
         int64_t(pool_.n_blocks()) * pool_.block_size());
  auto s = std::make_unique<Seq>();
  s->id = next_id_++;
  s->tokens = prompt;
  s->tokens.reserve(prompt.size() + size_t(opt.max_new_tokens));
  s->prompt_len = int(prompt.size());
  s->opt = opt;
  Sampler::check(opt.sampling, V);
  if (!argmax_only(opt.sampling)) s->sampler = std::make_unique<Sampler>(opt.sampling, V);
  s->submitted = Clock::now();
  s->resume = resume;
  s->result.metrics.prompt_tokens = s->prompt_len;
  waiting_.push_back(s.get());
  const Id id = s->id;
  seqs_.emplace(id, std::move(s));
  return id;
}

void Scheduler::cancel(Id id, const char* reason) {
  auto it = seqs_.find(id);
  if (it == seqs_.end() || it->second->finished) return;
  if (it->second->cancel_reason.empty()) it->second->cancel_reason = reason;
}

GenerationResult Scheduler::take(Id id, bool park) {
  auto it = seqs_.find(id);
  if (it == seqs_.end() || !it->second->finished || it->second->taken)
    fail("scheduler: sequence ", id, " is not done");
  Seq& s = *it->second;
  GenerationResult r = std::move(s.result);
  s.taken = true;
  auto p = std::find(parked_.begin(), parked_.end(), &s);
  if (park && p != parked_.end()) {  // most recently used now
    parked_.erase(p);
    parked_.push_back(&s);
  } else {
    forget(id);
  }
  return r;
}

void Scheduler::forget(Id id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end() || !it->second->finished) return;
  unpark(*it->second);
  if (it->second->taken) seqs_.erase(it);
}

void Scheduler::unpark(Seq& s) {
  auto p = std::find(parked_.begin(), parked_.end(), &s);
  if (p != parked_.end()) parked_.erase(p);
  release_blocks(s);
}

void Scheduler::release_blocks(Seq& s) {
  for (int32_t b : s.blocks) pool_.release(b);
  s.blocks.clear();
  s.hashes.clear();
  s.computed = 0;
}

// s (being admitted) takes over the computed positions of parked sequence `from` that its tokens
// start with, leaving at least its last token to compute; a published block it would write into
// is left behind.
void Scheduler::adopt(Seq& s, Seq& from) {
  const int bs = pool_.block_size();
  const int len = int(s.tokens.size());
  int c = 0;
  while (c < from.computed && c < len - 1 && from.tokens[size_t(c)] == s.tokens[size_t(c)]) ++c;
  int keep = (c + bs - 1) / bs;
  if (c % bs && pool_.published(from.blocks[size_t(keep - 1)])) {
    // The rows after c would be written into a shared block: into a private copy of it instead.
    const int copy = pool_.alloc(keep > 1 ? from.blocks[size_t(keep - 2)] : -1);
    if (copy >= 0) {
      runner_.copy_kv_block(from.blocks[size_t(keep - 1)], copy);
      pool_.release(from.blocks[size_t(keep - 1)]);
      from.blocks[size_t(keep - 1)] = copy;
    } else {
      c = --keep * bs;
    }
  }
  s.blocks.assign(from.blocks.begin(), from.blocks.begin() + keep);
  from.blocks.erase(from.blocks.begin(), from.blocks.begin() + keep);
  s.hashes.assign(from.hashes.begin(),
                  from.hashes.begin() + std::min<size_t>(from.hashes.size(), size_t(c / bs)));
  s.computed = c;
  unpark(from);
}

void Scheduler::finish(Seq& s, const std::string& reason, std::vector<Event>& events) {
  // The cache keeps what was computed, unless a failed step may have left it half written.
  if (reason == "error") release_blocks(s);
  s.finished = true;
  parked_.push_back(&s);
  if (s.running) running_.erase(std::find(running_.begin(), running_.end(), &s));
  auto w = std::find(waiting_.begin(), waiting_.end(), &s);
  if (w != waiting_.end()) waiting_.erase(w);
  s.running = false;
  GenerationResult& r = s.result;
  r.finish_reason = reason;
  r.tokens.assign(s.tokens.begin() + s.prompt_len, s.tokens.end());
  GenerationMetrics& m = r.metrics;
  m.new_tokens = s.new_tokens();
  if (m.new_tokens > 0) m.decode_ms = ms_between(s.first_token, s.last_token);
  if (m.new_tokens > 1) {
    m.ms_per_token = m.decode_ms / (m.new_tokens - 1);
    m.tokens_per_s = m.ms_per_token > 0 ? 1000.0 / m.ms_per_token : 0;
  }
  if (m.prefill_ms > 0) m.prefill_tokens_per_s = m.prefill_tokens * 1000.0 / m.prefill_ms;
  events.push_back({s.id, -1, true});
}

void Scheduler::preempt(Seq& v) {
  release_blocks(v);
  v.running = false;
  running_.erase(std::find(running_.begin(), running_.end(), &v));
  waiting_.push_front(&v);
  ++v.result.metrics.preemptions;
}

// Blocks for s's next n positions: parked sequences are let go first, then, when allowed, the
// most recently admitted running sequences are preempted, s itself if it is the newest (it then
// waits, and false is returned).
bool Scheduler::reserve(Seq& s, int n, bool may_preempt) {
  const int bs = pool_.block_size();
  const int need = (s.computed + n + bs - 1) / bs - int(s.blocks.size());
  while (pool_.available() < need) {
    if (!parked_.empty()) {
      unpark(*parked_.front());
      continue;
    }
    if (!may_preempt) return false;
    if (running_.empty()) return false;
    Seq* victim = running_.back();
    preempt(*victim);
    if (victim == &s) return false;
  }
  for (int i = 0; i < need; ++i)
    s.blocks.push_back(pool_.alloc(s.blocks.empty() ? -1 : s.blocks.back()));
  return true;
}

void Scheduler::admit(int& budget, std::vector<Entry>& batch) {
  const int bs = pool_.block_size();
  while (budget > 0 && !waiting_.empty() && int(running_.size()) < max_seqs_) {
    Seq& s = *waiting_.front();
    const int len = int(s.tokens.size());
    // A parked sequence it continues, else the cached prefix (whole blocks only), leaving the last
    // known token to compute.
    if (s.resume) {
      auto from = seqs_.find(s.resume);
      if (from != seqs_.end() && from->second->finished && !from->second->blocks.empty())
        adopt(s, *from->second);
      forget(s.resume);  // continued (or evicted meanwhile): nobody resumes it again
      s.resume = 0;
    }
    if (s.blocks.empty())
      s.computed = pool_.match(s.tokens.data(), (len - 1) / bs, s.blocks, s.hashes) * bs;
    const int n = std::min(len - s.computed, budget);
    if (!reserve(s, n, false)) {
      release_blocks(s);  // first come, first served: nobody overtakes it
      return;
    }
    if (!s.ever_ran) {
      s.ever_ran = true;
      s.result.metrics.queue_ms = ms_between(s.submitted, Clock::now());
    }
    s.result.metrics.prefill_tokens += len - s.computed;
    waiting_.pop_front();
    s.running = true;
    running_.push_back(&s);
    batch.push_back({&s, n});
    budget -= n;
  }
}

bool Scheduler::step(std::vector<Event>& events) {
  for (auto& [id, s] : seqs_)
    if (!s->finished && !s->cancel_reason.empty()) finish(*s, s->cancel_reason, events);

  // Running sequences first, oldest first: one decode row each, or their prompt's next chunk.
  int budget = max_batch_tokens_;
  std::vector<Entry>& batch = batch_;
  batch.clear();
  for (size_t i = 0; i < running_.size() && budget > 0; ++i) {
    Seq& s = *running_[i];
    const int n = std::min(int(s.tokens.size()) - s.computed, budget);
    if (!reserve(s, n, true)) break;  // s was the newest and waits again
    batch.push_back({&s, n});
    budget -= n;
  }
  // Preemption may have dropped sequences already in the batch.
  batch.erase(
      std::remove_if(batch.begin(), batch.end(), [](const Entry& e) { return !e.seq->running; }),
      batch.end());
  admit(budget, batch);
  if (batch.empty()) {
    // Nothing can run: blocks are held outside the scheduler (direct Runner caches).
    if (!waiting_.empty() && running_.empty()) {
      Seq& s = *waiting_.front();
      s.result.error = "the KV cache budget is used up by other caches of this model";
      finish(s, "error", events);
      return true;
    }
    return !events.empty();
  }
  run_batch(events);
  return true;
}

void Scheduler::run_batch(std::vector<Event>& events) {
  const std::vector<Entry>& batch = batch_;
  std::vector<Seq*>& outs = outs_;
  tokens_.clear();
  rows_.clear();
  out_rows_.clear();
  outs.clear();
  bool all_greedy = true;
  for (const Entry& e : batch) {
    Seq& s = *e.seq;
    SeqRows r;
    r.row0 = int(tokens_.size());
    r.n_rows = e.n;
    r.pos0 = s.computed;
    r.blocks = s.blocks.data();
    r.n_blocks = int(s.blocks.size());
    rows_.push_back(r);
    tokens_.insert(tokens_.end(), s.tokens.begin() + s.computed,
                   s.tokens.begin() + s.computed + e.n);
    if (s.computed + e.n == int(s.tokens.size())) {  // its last known token: sample the next
      out_rows_.push_back(int32_t(tokens_.size()) - 1);
      outs.push_back(&s);
      all_greedy = all_greedy && !s.sampler;
    }
  }
  StepInputs in;
  in.tokens = tokens_.data();
  in.n_tokens = int(tokens_.size());
  in.seqs = rows_.data();
  in.n_seqs = int(rows_.size());
  in.out_rows = out_rows_.data();
  in.n_out = int(out_rows_.size());
  argmax_.assign(out_rows_.size(), -1);
  if (all_greedy) {
    in.argmax = argmax_.data();
  } else {
    // Each sampler's top-k (greedy ones' argmax) is all it reads of its row.
    in.logits = logits_.get();
    top_k_.clear();
    for (const Seq* s : outs)
      top_k_.push_back(s->sampler ? logits_needed(s->opt.sampling, runner_.vocab_size()) : 1);
    in.top_k = top_k_.data();
  }
  try {
    runner_.step(in);
  } catch (const std::exception& ex) {
    for (const Entry& e : batch) {
      e.seq->result.error = ex.what();
      finish(*e.seq, "error", events);
    }
    return;
  }
  const auto now = Clock::now();
  for (const Entry& e : batch) after_rows(*e.seq, e.n);
  const size_t V = size_t(runner_.vocab_size());
  for (size_t i = 0; i < outs.size(); ++i) {
    Seq& s = *outs[i];
    if (s.new_tokens() == 0) s.result.metrics.prefill_ms = ms_between(s.submitted, now);
    sample_next(s, all_greedy ? nullptr : logits_.get() + i * V, argmax_[i], events);
  }
}

// Publishes the blocks that n more computed positions filled.
void Scheduler::after_rows(Seq& s, int n) {
  s.computed += n;
  const int bs = pool_.block_size();
  while (int(s.hashes.size()) < s.computed / bs) {
    const size_t b = s.hashes.size();
    const uint64_t parent = b ? s.hashes[b - 1] : KVPool::kRootHash;
    s.hashes.push_back(pool_.publish(s.blocks[b], parent, s.tokens.data() + b * size_t(bs)));
  }
}

void Scheduler::sample_next(Seq& s, float* logits, int32_t argmax, std::vector<Event>& events) {
  if (s.opt.max_new_tokens == 0) return finish(s, "length", events);
  int32_t tok = argmax;
  try {
    if (logits && s.sampler) {
      tok = s.sampler->sample(logits, runner_.vocab_size(), s.tokens.data(), int(s.tokens.size()));
    } else if (logits) {  // greedy, in a step that others needed the logits of
      tok = first_argmax(logits, runner_.vocab_size());
    }
    if (tok < 0)
      fail("sampler: no finite logit among ", runner_.vocab_size(), " (all NaN or -inf)");
  } catch (const std::exception& ex) {
    s.result.error = ex.what();
    return finish(s, "error", events);
  }
  const auto now = Clock::now();
  if (s.new_tokens() == 0) {
    s.first_token = now;
    s.result.metrics.ttft_ms = ms_between(s.submitted, now);
  }
  s.last_token = now;
  s.tokens.push_back(tok);
  events.push_back({s.id, tok, false});
  const bool stop = !s.opt.ignore_eos && std::find(s.opt.stop_ids.begin(), s.opt.stop_ids.end(),
                                                   tok) != s.opt.stop_ids.end();
  if (stop) return finish(s, "stop", events);
  if (s.new_tokens() >= s.opt.max_new_tokens || int(s.tokens.size()) >= runner_.max_positions())
    return finish(s, "length", events);
}

}  // namespace hearth
