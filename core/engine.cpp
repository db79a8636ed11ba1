#include "core/engine.h"

#include "core/error.h"

namespace hearth {

Engine::Engine(Runner& runner, const SchedulerOptions& opt)
    : runner_(runner), sched_(runner, opt) {}

void Engine::forget(Scheduler::Id cache) {
  std::lock_guard<std::mutex> lk(mu_);
  sched_.forget(cache);
}

int Engine::waiting() {
  std::lock_guard<std::mutex> lk(mu_);
  return sched_.waiting();
}

int Engine::held() {
  std::lock_guard<std::mutex> lk(mu_);
  return sched_.held();
}

int Engine::running() {
  std::lock_guard<std::mutex> lk(mu_);
  return sched_.running();
}

Engine::Stats Engine::stats() {
  std::lock_guard<std::mutex> lk(mu_);
  const KVPool& pool = runner_.kv_pool();
  Stats s;
  s.waiting = sched_.waiting();
  s.running = sched_.running();
  s.held = sched_.held();
  s.parked = sched_.parked();
  s.kv_blocks = pool.n_blocks();
  s.kv_used = pool.used();
  s.kv_cached = pool.cached();
  s.prefix_hits = pool.hits();
  return s;
}

GenerationResult Engine::generate(const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                                  const std::function<bool(int32_t)>& on_token,
                                  const std::atomic<bool>* cancel, Scheduler::Id* cache) {
  std::unique_lock<std::mutex> lk(mu_);
  const Scheduler::Id id = sched_.submit(prompt, opt, cache ? *cache : 0);
  if (cache) *cache = 0;  // taken over by the request, or let go
  auto& box = inbox_[id];
  std::vector<int32_t> accepted;  // the tokens this caller took, up to a stop it asked for
  bool stopped = false, done = false;
  while (!done) {
    if (!box.empty()) {
      const Scheduler::Event ev = box.front();
      box.pop_front();
      if (ev.finished) {
        done = true;
      } else if (!stopped) {
        accepted.push_back(ev.token);
        if (on_token) {
          lk.unlock();
          const bool go_on = on_token(ev.token);
          lk.lock();
          if (!go_on) {
            stopped = true;
            sched_.cancel(id, "stop");
          }
        }
      }
      continue;
    }
    if (cancel && cancel->load(std::memory_order_relaxed)) sched_.cancel(id, "cancelled");
    events_.clear();
    if (!sched_.step(events_)) fail("engine: nothing to run while a request is pending");
    for (const Scheduler::Event& ev : events_) inbox_[ev.id].push_back(ev);
  }
  inbox_.erase(id);
  GenerationResult r = sched_.take(id, cache != nullptr);
  if (cache) *cache = id;  // a failed step left nothing parked: resuming it computes everything
  if (r.finish_reason == "error") fail(r.error);
  if (stopped) r.finish_reason = "stop";
  r.tokens = std::move(accepted);
  r.metrics.new_tokens = int(r.tokens.size());
  return r;
}

}  // namespace hearth
