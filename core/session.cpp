#include "core/session.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"

namespace hearth {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
}  // namespace

Session::Session(Runner& runner) : runner_(runner), logits_(size_t(runner.vocab_size())) {}

void Session::reset() {
  cached_.clear();
}

void Session::ensure_capacity(int needed, int keep) {
  if (needed > runner_.max_positions())
    fail("prompt and max new tokens need ", needed, " positions but max_position_embeddings is ",
         runner_.max_positions());
  if (kv_ && kv_->capacity >= needed) return;
  if (!kv_ || keep == 0) {
    kv_.reset();  // free before allocating the larger one
    kv_ = runner_.new_kv(needed);
    return;
  }
  // Growing a chat: leave room for a few more turns so we do not copy every turn.
  int cap = std::min(runner_.max_positions(), std::max(needed, kv_->capacity * 2));
  kv_ = runner_.grow_kv(*kv_, keep, cap);
}

GenerationResult Session::generate(const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                                   const std::function<bool(int32_t)>& on_token,
                                   const std::atomic<bool>* cancel) {
  if (prompt.empty()) fail("the prompt is empty");
  if (opt.max_new_tokens < 0) fail("max new tokens must not be negative");
  const auto t0 = Clock::now();
  GenerationResult res;
  res.metrics.prompt_tokens = int(prompt.size());

  // Reuse the cached prefix, but always recompute at least the last prompt token: its logits
  // are what the first new token is sampled from.
  size_t keep = 0;
  while (keep < cached_.size() && keep < prompt.size() && cached_[keep] == prompt[keep]) ++keep;
  keep = std::min(keep, prompt.size() - 1);
  cached_.resize(keep);

  Sampler sampler(opt.sampling, runner_.vocab_size());
  std::vector<int32_t> history(prompt);
  history.reserve(prompt.size() + size_t(opt.max_new_tokens));
  // Plain greedy decoding needs only the argmax, which the backend can take inside the LM head.
  const SamplingParams& sp = opt.sampling;
  const bool argmax_only = sp.temperature <= 0.f && sp.repetition_penalty == 1.f &&
                           sp.presence_penalty == 0.f && sp.frequency_penalty == 0.f;
  int32_t argmax = -1;
  auto step = [&](const int32_t* tokens, int n, int pos0) {
    if (argmax_only)
      argmax = runner_.forward_argmax(*kv_, tokens, n, pos0);
    else
      runner_.forward(*kv_, tokens, n, pos0, nullptr, logits_.data());
  };
  auto next_token = [&] {
    if (!argmax_only)
      return sampler.sample(logits_.data(), runner_.vocab_size(), history.data(),
                            int(history.size()));
    if (argmax < 0)
      fail("sampler: no finite logit among ", runner_.vocab_size(), " (all NaN or -inf)");
    return argmax;
  };
  try {
    ensure_capacity(int(prompt.size()) + std::max(opt.max_new_tokens, 1), int(keep));
    const int n_new = int(prompt.size() - keep);
    step(prompt.data() + keep, n_new, int(keep));
    cached_ = prompt;
    res.metrics.prefill_tokens = n_new;
    res.metrics.prefill_ms = ms_since(t0);

    Clock::time_point first_token_time;
    res.finish_reason = "length";
    for (int i = 0; i < opt.max_new_tokens; ++i) {
      if (cancel && cancel->load(std::memory_order_relaxed)) {
        res.finish_reason = "cancelled";
        break;
      }
      if (i > 0) {
        const int32_t prev = res.tokens.back();
        step(&prev, 1, int(cached_.size()));
        cached_.push_back(prev);
      }
      const int32_t tok = next_token();
      if (i == 0) {
        first_token_time = Clock::now();
        res.metrics.ttft_ms = ms_since(t0);
      }
      res.tokens.push_back(tok);
      history.push_back(tok);
      const bool is_stop = !opt.ignore_eos && std::find(opt.stop_ids.begin(), opt.stop_ids.end(),
                                                        tok) != opt.stop_ids.end();
      const bool go_on = on_token ? on_token(tok) : true;
      if (is_stop || !go_on) {
        res.finish_reason = "stop";
        break;
      }
    }
    auto& m = res.metrics;
    m.new_tokens = int(res.tokens.size());
    if (m.new_tokens > 0) m.decode_ms = ms_since(first_token_time);
    if (m.new_tokens > 1) {
      m.ms_per_token = m.decode_ms / (m.new_tokens - 1);
      m.tokens_per_s = 1000.0 / m.ms_per_token;
    }
    if (m.prefill_ms > 0) m.prefill_tokens_per_s = m.prefill_tokens * 1000.0 / m.prefill_ms;
  } catch (...) {
    // The cache may hold a half-written step: forget what it holds, and free it.
    cached_.clear();
    kv_.reset();
    throw;
  }
  return res;
}

}  // namespace hearth
