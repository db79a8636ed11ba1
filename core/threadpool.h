// A persistent pool: run(fn) calls fn(thread_index, n_threads) on every thread (the caller is
// thread 0) and returns when all are done. Workers spin briefly before sleeping because decode
// issues hundreds of tiny jobs per token and a futex wake per job would dominate.
#pragma once
#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace hearth {

// Threads when the caller names none: one per physical core this process may run on (SMT
// siblings counted once; at least 1).
int default_thread_count();

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_; }
  void run(const std::function<void(int, int)>& fn);

  // Splits [0, n) into contiguous ranges, one per thread, aligned to `align`.
  static void split(int64_t n, int tid, int nth, int64_t align, int64_t* begin, int64_t* end);

 private:
  void worker(int tid);

  int n_;
  std::vector<std::thread> threads_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<int> sleepers_{0};
};

}  // namespace hearth

namespace hearth {

// A sense-reversing spin barrier for the threads of one ThreadPool::run. Compute phases between
// barriers are microseconds long during decode, so sleeping here would cost more than it saves.
class SpinBarrier {
 public:
  explicit SpinBarrier(int n) : n_(n) {}
  void wait();

 private:
  int n_;
  std::atomic<int> count_{0};
  std::atomic<uint32_t> phase_{0};
};

}  // namespace hearth
