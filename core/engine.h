// One model's scheduler shared by every session and thread that generates with the model. Any
// thread may run a request: it submits it and then, until the request ends, either hands its own
// tokens to its callback or runs the next step for everyone. Whichever thread takes the lock runs
// the step, so the engine has no thread of its own, a lone request is run by its caller with no
// hand-off, and one caller's slow callback does not stall the others' steps.
#pragma once
#include <atomic>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <vector>

#include "core/scheduler.h"

namespace hearth {

class Engine {
 public:
  explicit Engine(Runner& runner, const SchedulerOptions& opt = {});

  Runner& runner() { return runner_; }

  // Runs one request to its end. on_token is called on this thread with each new token; returning
  // false stops generation (finish reason "stop"); cancel, when set from any thread, ends it within
  // a step ("cancelled"). Throws hearth::Error for a request that cannot run or a failed step.
  // cache, when given, names a parked sequence this request continues (0: none) and is set to the
  // request's own, parked for the next turn (Scheduler::take); forget() lets it go.
  GenerationResult generate(const std::vector<int32_t>& prompt, const GenerateOptions& opt,
                            const std::function<bool(int32_t)>& on_token = nullptr,
                            const std::atomic<bool>* cancel = nullptr,
                            Scheduler::Id* cache = nullptr);
  void forget(Scheduler::Id cache);

  // Sequences waiting and running, for metrics.
  int waiting();
  int running();
  int held();  // Scheduler::held

  // One consistent snapshot of the scheduler and its KV pool, for a server's metrics.
  struct Stats {
    int waiting = 0, running = 0, held = 0, parked = 0;
    int kv_blocks = 0, kv_used = 0, kv_cached = 0;
    int64_t prefix_hits = 0;  // blocks handed out by prefix matches so far
  };
  Stats stats();

 private:
  Runner& runner_;
  std::mutex mu_;  // guards everything below; held while a step runs
  Scheduler sched_;
  std::map<Scheduler::Id, std::deque<Scheduler::Event>> inbox_;
  std::vector<Scheduler::Event> events_;
};

}  // namespace hearth
