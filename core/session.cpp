#include "core/session.h"

namespace hearth {

Session::Session(Engine& engine) : engine_(engine) {}

Session::~Session() {
  if (cache_) engine_.forget(cache_);
}

void Session::reset() {
  cached_.clear();
  if (cache_) engine_.forget(cache_);
  cache_ = 0;
}

size_t Session::kv_bytes() const {
  Runner& r = engine_.runner();
  const size_t bs = size_t(r.kv_pool().block_size());
  return (cached_.size() + bs - 1) / bs * bs * r.kv_position_bytes();
}

GenerationResult Session::generate(const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                                   const std::function<bool(int32_t)>& on_token,
                                   const std::atomic<bool>* cancel) {
  cached_.clear();
  GenerationResult r = engine_.generate(prompt, opt, on_token, cancel, &cache_);
  cached_ = prompt;
  if (!r.tokens.empty()) cached_.insert(cached_.end(), r.tokens.begin(), r.tokens.end() - 1);
  return r;
}

}  // namespace hearth
