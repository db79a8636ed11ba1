// A step's weight rows handed to the pool's threads in chunks as each asks for more, instead of
// one fixed share each: a thread whose core is slower (an efficiency core of a hybrid laptop CPU,
// a core another process or a VM's neighbour is using) takes fewer rows, and the others no longer
// wait for it at the barrier. Chunks shrink as the rows run out (the first ones are most of a
// thread's even share, so the weight streams stay long), down to kClaimMinWeights weights.
#pragma once
#include <algorithm>
#include <atomic>
#include <cstdint>

namespace hearth::cpu {

// The smallest chunk, in weights: each chunk is a kernel call that starts its prefetch streams
// afresh (~0.1 us each, compiled.h's kBlockRows), against ~2 us to read 64 KiB.
constexpr int64_t kClaimMinWeights = int64_t(1) << 17;

class RowClaims {
 public:
  // Items [0, n) (rows, heads) over nth threads, in chunks of multiples of `align` and of at
  // least `min` items but the last; `next` is this step's counter, zero before the step.
  RowClaims(std::atomic<int64_t>& next, int64_t n, int64_t align, int64_t min, int nth)
      : next_(next), n_(n), align_(align), min_(std::max(align, min)), nth_(nth) {}

  // The smallest chunk of rows of k weights each: kClaimMinWeights, in whole multiples of align.
  static int64_t min_rows(int64_t k, int64_t align) {
    const int64_t rows = kClaimMinWeights / std::max<int64_t>(k, 1);
    return std::max(align, (rows + align - 1) / align * align);
  }

  // The next chunk [*b, *e); false once every row is taken. One thread takes every row in one
  // chunk.
  bool next(int64_t* b, int64_t* e) {
    int64_t at = next_.load(std::memory_order_relaxed);
    for (;;) {
      if (at >= n_) return false;
      const int64_t left = n_ - at;
      int64_t take = nth_ <= 1 ? left : std::max(min_, left / (nth_ + 1) / align_ * align_);
      take = std::min(take, left);
      if (next_.compare_exchange_weak(at, at + take, std::memory_order_relaxed)) {
        *b = at, *e = at + take;
        return true;
      }
    }
  }

 private:
  std::atomic<int64_t>& next_;
  int64_t n_, align_, min_;
  int nth_;
};

}  // namespace hearth::cpu
