#include "core/threadpool.h"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <set>
#include <string>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define HEARTH_PAUSE() _mm_pause()
#elif defined(__aarch64__)
#define HEARTH_PAUSE() asm volatile("yield")
#else
#define HEARTH_PAUSE() ((void)0)
#endif

namespace hearth {

int default_thread_count() {
  // Physical cores among the CPUs this process may run on: one per distinct set of hardware
  // threads sharing a core (SMT siblings share its FMA units and would only contend for them).
  std::set<std::string> cores;
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof mask, &mask) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (!CPU_ISSET(c, &mask)) continue;
      std::ifstream f("/sys/devices/system/cpu/cpu" + std::to_string(c) +
                      "/topology/thread_siblings_list");
      std::string siblings;
      if (!std::getline(f, siblings)) siblings = "cpu" + std::to_string(c);
      cores.insert(siblings);
    }
  }
  if (!cores.empty()) return int(cores.size());
  const unsigned n = std::thread::hardware_concurrency();
  return n ? int(n) : 1;
}

namespace {
constexpr int kSpinIterations = 1 << 14;
}

ThreadPool::ThreadPool(int n_threads) : n_(std::max(1, n_threads)) {
  for (int t = 1; t < n_; ++t) threads_.emplace_back([this, t] { worker(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::split(int64_t n, int tid, int nth, int64_t align, int64_t* begin, int64_t* end) {
  int64_t blocks = (n + align - 1) / align;
  int64_t per = blocks / nth, rem = blocks % nth;
  int64_t b0 = tid * per + std::min<int64_t>(tid, rem);
  int64_t b1 = b0 + per + (tid < rem ? 1 : 0);
  *begin = std::min(n, b0 * align);
  *end = std::min(n, b1 * align);
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(n_ - 1, std::memory_order_relaxed);
  {
    // The lock orders the generation bump against sleepers checking it before they wait.
    std::lock_guard<std::mutex> lock(mu_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  if (sleepers_.load(std::memory_order_acquire) > 0) cv_.notify_all();
  fn(0, n_);
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < kSpinIterations)
      HEARTH_PAUSE();
    else
      std::this_thread::yield();
  }
  job_ = nullptr;
}

void ThreadPool::worker(int tid) {
  uint64_t seen = 0;
  for (;;) {
    int spins = 0;
    uint64_t g;
    while ((g = generation_.load(std::memory_order_acquire)) == seen) {
      if (++spins < kSpinIterations) {
        HEARTH_PAUSE();
        continue;
      }
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1);
      cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      sleepers_.fetch_sub(1);
      spins = 0;
    }
    seen = g;
    if (stop_.load()) return;
    (*job_)(tid, n_);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace hearth

namespace hearth {

void SpinBarrier::wait() {
  if (n_ <= 1) return;
  uint32_t phase = phase_.load(std::memory_order_acquire);
  if (count_.fetch_add(1, std::memory_order_acq_rel) == n_ - 1) {
    count_.store(0, std::memory_order_relaxed);
    phase_.fetch_add(1, std::memory_order_release);
    return;
  }
  // Spin first (phases are microseconds apart), then yield so an oversubscribed machine can run
  // the thread we are waiting for.
  for (int spins = 0; phase_.load(std::memory_order_acquire) == phase; ++spins) {
    if (spins < kSpinIterations)
      HEARTH_PAUSE();
    else
      std::this_thread::yield();
  }
}

}  // namespace hearth
