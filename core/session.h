// A session is one conversation: the tokens its last request left in the cache. generate() takes
// the whole prompt each time and continues the last request's parked sequence, computing only what
// follows the common prefix (or, if its blocks were needed elsewhere meanwhile, what the KV pool's
// prefix cache lacks), which is what makes multi-turn chat cost only the new turn. The session
// owns no threads: all sessions of a model share its engine.
#pragma once
#include <atomic>
#include <functional>
#include <vector>

#include "core/engine.h"

namespace hearth {

class Session {
 public:
  explicit Session(Engine& engine);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // on_token is called with each new token as it is sampled; returning false stops generation
  // (finish reason "stop"). cancel, when set from any thread, stops it within one decode step.
  GenerationResult generate(const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                            const std::function<bool(int32_t)>& on_token = nullptr,
                            const std::atomic<bool>* cancel = nullptr);

  void reset();
  // The tokens the last request computed (its prompt and every generated token but the last),
  // oldest first: what a next turn starting with them finds cached, unless evicted meanwhile.
  const std::vector<int32_t>& cached_tokens() const { return cached_; }
  // KV memory those tokens occupy.
  size_t kv_bytes() const;

 private:
  Engine& engine_;
  std::vector<int32_t> cached_;
  Scheduler::Id cache_ = 0;  // the last request, parked with its blocks for the next turn
};

}  // namespace hearth
