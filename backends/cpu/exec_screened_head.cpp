// The LM head of one token read through its screen (head_screen.h): for greedy decoding only the
// rows that can be the argmax, for top-k sampling only those that can be among the k largest, are
// computed from the head itself. Layout: the head's rows as the matmuls read them (the model's, or
// the packed copy), its screen as head_screen.h describes, one thread per contiguous row range.
#include <algorithm>
#include <cmath>
#include <functional>
#include <queue>
#include <utility>
#include <vector>

#include "backends/cpu/compiled.h"
#include "backends/cpu/prefetch.h"
#include "backends/cpu/q8_panel.h"

namespace hearth::cpu {

namespace {

// Prefetches the head's group of `n` rows at g0 (rows, and scales if quantized): the groups a
// screened step computes are scattered, and each waited on memory from its first line. A packed
// group's rows lie where the rows would (kernels.h PackShape); split: the head is read from its
// screen and low bits, or deltas.
void prefetch_group(const Tensor& w, const void* w_il, const HeadScreen* split, bool panel,
                    int64_t g0, int64_t n) {
  if (split && w.dtype == DType::BF16) {  // the screen's panel group, the deltas, the exceptions
    const int64_t k = w.cols(), g = g0 / kQ4PanelRows, gb = q8_panel_group_bytes(k, kScreenGroup);
    const char* panel_group = static_cast<const char*>(split->w_il) + g * gb;
    const char* deltas = reinterpret_cast<const char*>(split->lo) + g0 * k;
    for (int64_t i = 0; i < gb; i += 64) prefetch_line(panel_group + i);
    for (int64_t i = 0; i < kQ4PanelRows * k; i += 64) prefetch_line(deltas + i);
    prefetch_line(split->exc_off + g);
    prefetch_line(split->exc_pos + split->exc_off[g]);
    prefetch_line(split->exc_fix + split->exc_off[g]);
    return;
  }
  if (split) {  // its high and low bits' 4-row group (head_screen.h), and its scales below
    const int64_t nc = w.cols() / 128;
    const char* hi = reinterpret_cast<const char*>(split->hi) + g0 * nc * kScreenQ8ChunkBytes;
    const char* lo = reinterpret_cast<const char*>(split->lo) + g0 * nc * kScreenLowChunkBytes;
    for (int64_t i = 0; i < n * nc * kScreenQ8ChunkBytes; i += 64) prefetch_line(hi + i);
    for (int64_t i = 0; i < n * nc * kScreenLowChunkBytes; i += 64) prefetch_line(lo + i);
  } else if (panel) {  // a Q8 panel: codes and scales in one span (q8_panel.h)
    const int64_t gb = q8_panel_group_bytes(w.cols(), w.group_size);
    const char* group = static_cast<const char*>(w_il) + g0 / kQ4PanelRows * gb;
    for (int64_t i = 0; i < gb; i += 64) prefetch_line(group + i);
    return;
  } else {
    const int64_t row_bytes = int64_t(w.nbytes) / w.rows();
    const char* rows = static_cast<const char*>(w_il ? w_il : w.data) + g0 * row_bytes;
    for (int64_t i = 0; i < n * row_bytes; i += 64) prefetch_line(rows + i);
  }
  if (!w.quantized()) return;
  const int64_t scale_row = w.cols() / w.group_size * 2;
  const char* scales = static_cast<const char*>(w.scales) + g0 * scale_row;
  for (int64_t i = 0; i < n * scale_row; i += 64) prefetch_line(scales + i);
}

// What both screened heads read: the head (as the matmuls read it), its screen, the calling
// thread's row range [b, e) and scratch, and the token's activations.
struct ScreenedHead {
  ScreenedHead(const StepCtx& c, const LinearStep& s, const float* x)
      : c(c),
        hs(c.cg.screen),
        w(c.cg.weight[size_t(s.parts[0].w)]),
        w_il(c.cg.w_il[size_t(s.parts[0].w)]),
        x(x),
        K(w.cols()),
        split(reads_split(c.cg, w, w_il)),
        panel(w_il && reads_q8_panel(c.kt, w)),
        group((w_il || split) && (w.dtype == DType::BF16 || panel) ? kQ4PanelRows : 4) {
    ThreadPool::split(w.rows(), c.tid, c.nth, 16, &b, &e);
    tmp = c.scratch() + c.cg.off_tmp;
    hw = tmp + c.cg.tmp_floats;
    // The screen and the head's kernel each keep what they derive from x in their own scratch.
    screen_scratch = c.scratch() + c.cg.off_mm + c.cg.screen_scratch;
    in = hs.hi ? ScreenInput() : screen_input(x, K);
    cand = reinterpret_cast<ScreenCandidate*>(c.cg.screen_cand.p.get()) + c.tid * c.cg.screen_cap;
  }
  // Rows [r, r1) of the screen: estimates into tmp, bounds on their error into hw. reuse: the
  // screen's previous call had the same x and nothing sharing its scratch ran since.
  void screen(int64_t r, int64_t r1, bool reuse) const {
    if (hs.hi) {
      ScreenQ8Args a{hs.hi, w.scales, w.scale_dtype,  w.group_size, x, K, r, r1,
                     tmp,   hw,       screen_scratch, reuse};
      c.kt.screen_q8(a);
    } else {
      matmul_rows(c, hs.q8, hs.w_il, x, 1, r, r1, tmp, epilogue_rows(1), e, reuse);
      for (int64_t i = 0; i < r1 - r; ++i) hw[i] = screen_bound(in, hs, r + i);
    }
  }

  // The head's own logits of the group holding row r (clipped to the range) into y[g0 - r0...]
  // where [g0, g1) is the group, returned. Groups are the whole head's: 4 rows, or 16 for a packed
  // BF16 head (its kernel sums 16 rows at once, each in column order) and a Q8 one in panels, so
  // each row's logit is the one the whole head gives.
  std::pair<int64_t, int64_t> exact(int64_t r, float* y, bool reuse) const {
    const int64_t g0 = r / group * group, g1 = std::min(g0 + group, e);
    matmul_rows(c, w, w_il, x, 1, g0, g1, y, group, 0, reuse);
    return {g0, g1};
  }
  void prefetch(int64_t r) const {
    prefetch_group(w, w_il, split ? &hs : nullptr, panel, r / group * group, group);
  }

  const StepCtx& c;
  const HeadScreen& hs;
  const Tensor& w;
  const void* w_il;
  const float* x;
  int64_t K, b = 0, e = 0;
  bool split;     // the head is read from its screen and low bits (head_screen.h)
  bool panel;     // w_il is Q8 panels
  int64_t group;  // rows the head's kernel computes together (exact)
  float *tmp = nullptr, *hw = nullptr, *screen_scratch = nullptr;
  ScreenInput in;
  ScreenCandidate* cand = nullptr;
};

// Raises `floor`, a value every thread may prune against, to v if v is higher; returns the floor.
float raise_floor(std::atomic<float>& floor, float v) {
  float now = floor.load(std::memory_order_relaxed);
  while (v > now && !floor.compare_exchange_weak(now, v, std::memory_order_relaxed)) {
  }
  return std::max(now, v);
}

}  // namespace

// The greedy LM head of one token through its screen (head_screen.h). Every thread screens its
// rows block by block, keeping the 4-row groups whose upper bound reaches the best lower bound so
// far, and computes each block's most promising group from the head itself at once, so that its
// logit raises that bound for the blocks after; then, in row order, it computes every kept group
// whose upper bound reaches the best logit any thread has computed so far, as the head's groups
// (ScreenedHead::exact) that hold them, so each row's logit is the one the whole head gives;
// every other row's is provably below the maximum. (0.6B INT4, 5-bit screen: ~15,000 groups
// pass the screen's own lower bounds, ~180 the best logit.)
void argmax_screened(const StepCtx& c, const LinearStep& s, const float* x) {
  CpuCompiled& cg = c.cg;
  const ScreenedHead h(c, s, x);
  const int64_t b = h.b, e = h.e, br = epilogue_rows(1);
  float* tmp = h.tmp;
  ScreenCandidate* cand = h.cand;
  float best = -INFINITY, lower = -INFINITY;
  int32_t best_row = -1;
  int64_t exact = 0, exact_seen = 0, m = 0;
  auto compute = [&](int64_t row) {
    const auto [g0, g1] = h.exact(row, tmp, exact > 0);
    for (int64_t r = g0; r < g1; ++r) {
      const float v = tmp[r - g0];  // NaN never wins; ties go to the first row
      if (v > best || (v == best && r < best_row)) best = v, best_row = int32_t(r);
    }
    exact += g1 - g0;
    lower = std::max(lower, raise_floor(cg.screen_best, best));
  };
  for (int64_t r = b; r < e; r += br) {
    const int64_t r1 = std::min(e, r + br);
    // The Q8 copy's activations are reused unless a head group (another kernel, the same
    // scratch) was computed since.
    h.screen(r, r1, r > b && (h.hs.hi != nullptr || exact == exact_seen));
    exact_seen = exact;
    const int64_t m0 = m;
    lower = std::max(lower, cg.screen_best.load(std::memory_order_relaxed));
    m += c.kt.screen_select(tmp, h.hw, r1 - r, int32_t(r), &lower, cand + m);
    int64_t top = -1;
    for (int64_t i = m0; i < m; ++i)
      if (top < 0 || cand[i].upper > cand[top].upper) top = i;
    if (top >= 0 && cand[top].upper >= best) {
      compute(cand[top].row);
      // Done, with any other group of the screen's inside the one computed.
      for (int64_t i = m0; i < m; ++i)
        if (cand[i].row / h.group == cand[top].row / h.group) cand[i].upper = -INFINITY;
    }
  }
  int64_t next = 0;  // the next group to compute after the current one, prefetched meanwhile
  auto find = [&](int64_t from) {
    const float bar = std::max(best, cg.screen_best.load(std::memory_order_relaxed));
    while (from < m && !(cand[from].upper >= bar)) ++from;
    return from;
  };
  // Candidates come in row order: the screen's 4-row groups inside one group of the head's are
  // computed once.
  auto find_new = [&](int64_t from, int64_t row) {
    for (from = find(from); from < m && cand[from].row / h.group == row / h.group;)
      from = find(from + 1);
    return from;
  };
  for (int64_t i = find(0); i < m;) {
    next = find_new(i + 1, cand[i].row);
    if (next < m) h.prefetch(cand[next].row);
    compute(cand[i].row);
    i = find(next);  // the bar may have risen
  }
  if (best_row >= 0) {
    cg.best_val[size_t(c.tid) * size_t(cg.max_outputs)] = best;
    cg.best_idx[size_t(c.tid) * size_t(cg.max_outputs)] = best_row;
  }
  cg.screen_rows += exact;
  if (c.tid == 0) cg.screen_ran = true;
}

namespace {

// The k largest of the values offered, with the k-th (the smallest kept) on top: -inf until k
// values came. NaN is never kept.
class KthLargest {
 public:
  explicit KthLargest(int k) : k_(size_t(k)) { heap_.reserve(k_ + 1); }
  void offer(float v) {
    if (!(v > bar_)) return;
    heap_.push_back(v);
    std::push_heap(heap_.begin(), heap_.end(), std::greater<float>());
    if (heap_.size() > k_) {
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<float>());
      heap_.pop_back();
    }
    if (heap_.size() == k_) bar_ = heap_.front();
  }
  float bar() const { return bar_; }
  const std::vector<float>& values() const { return heap_; }

 private:
  size_t k_;
  std::vector<float> heap_;
  float bar_ = -INFINITY;
};

// The threads' exchange of their first exact logits (CpuCompiled::topk_shared): a thread's own
// floor reaches at most its range's k-th largest, the whole head's is the k-th largest of all the
// ranges' values, and with each at its own range's two threads computed 44% more head rows than
// one (0.6B INT4 stand-in, top-k 20). Nothing waits: a thread merges what others have published.
class TopkExchange {
 public:
  TopkExchange(const StepCtx& c, int k)
      : cg_(c.cg),
        tid_(c.tid),
        on_(c.nth > 1 && k <= CpuCompiled::kTopkShared),
        merged_(k),
        pending_(on_ ? c.nth - 1 : 0),
        seen_(size_t(c.nth)) {}
  // This thread's values: published once, then merged with everyone's into the floor.
  void publish(const KthLargest& exact) {
    if (!on_) return;
    const auto& v = exact.values();
    float* slot = cg_.topk_shared.f() + tid_ * CpuCompiled::kTopkShared;
    std::fill(slot, slot + CpuCompiled::kTopkShared, -INFINITY);
    std::copy(v.begin(), v.end(), slot);
    for (float x : v) merged_.offer(x);
    cg_.topk_ready[size_t(tid_)].store(cg_.run_no, std::memory_order_release);
    poll();
  }
  // After publish: merges every thread's values that arrived since, raising the floor.
  void poll() {
    if (pending_ == 0) return;
    for (size_t t = 0; t < seen_.size(); ++t) {
      if (int(t) == tid_ || seen_[t] ||
          cg_.topk_ready[t].load(std::memory_order_acquire) != cg_.run_no)
        continue;
      const float* slot = cg_.topk_shared.f() + t * CpuCompiled::kTopkShared;
      for (int i = 0; i < CpuCompiled::kTopkShared; ++i) merged_.offer(slot[i]);
      seen_[t] = 1;
      --pending_;
      raise_floor(cg_.screen_best, merged_.bar());
    }
  }

 private:
  CpuCompiled& cg_;
  int tid_;
  bool on_;
  KthLargest merged_;
  int pending_;
  std::vector<uint8_t> seen_;
};

}  // namespace

// Top-k sampling's LM head of one token (StepInputs::top_k): rows get their exact logits where
// they can be among the k largest of the whole head, -inf elsewhere, so the k largest and
// everything tied with the k-th are exact. Two bars, each the k-th largest of k distinct rows'
// values and so a proof that any row whose upper bound is below it has k rows above it: first
// the screen's lower bounds (estimate - bound) of a thread's range, then the exact logits it
// computed so far. Each is a floor under the whole head's k-th largest, so every thread prunes
// against the highest any thread has reached (screen_best, TopkExchange). Candidates are the
// head's own groups (ScreenedHead::exact), so each logit is the one the whole head gives.
void topk_screened(const StepCtx& c, const LinearStep& s, const float* x, int k, float* out) {
  CpuCompiled& cg = c.cg;
  const ScreenedHead h(c, s, x);
  const int64_t b = h.b, e = h.e, br = epilogue_rows(1);
  float* tmp = h.tmp;
  ScreenCandidate* cand = h.cand;
  std::fill(out + b, out + e, -INFINITY);
  KthLargest screened(k);
  int64_t m = 0;
  for (int64_t r = b; r < e; r += br) {
    const int64_t r1 = std::min(e, r + br);
    h.screen(r, r1, r > b);
    // (Not screen_select: it raises the bar to the best lower bound, the argmax's.)
    for (int64_t g = 0; g < r1 - r; g += h.group) {
      float up = -INFINITY;
      for (int64_t i = g; i < std::min(r1 - r, g + h.group); ++i) {
        screened.offer(tmp[i] - h.hw[i]);
        up = std::max(up, tmp[i] + h.hw[i]);  // NaN: keeps up
      }
      if (up >= screened.bar()) cand[m++] = {int32_t(r + g), up};
    }
  }
  const float bar = raise_floor(cg.screen_best, screened.bar());
  int64_t kept = 0;
  for (int64_t i = 0; i < m; ++i)
    if (cand[i].upper >= bar) cand[kept++] = cand[i];
  // First k groups of the highest upper bounds, rows enough for k several times over, so that
  // the exact bar starts near the k-th logit (a selection: sorting thousands of candidates cost
  // 5% of a 0.6B INT4 decode); then, in any order, every other one that still reaches it.
  const int64_t first = std::min<int64_t>(kept, k);
  std::nth_element(
      cand, cand + first, cand + kept,
      [](const ScreenCandidate& a, const ScreenCandidate& z) { return a.upper > z.upper; });
  KthLargest exact(k);
  int64_t rows = 0;
  auto compute = [&](int64_t row) {  // row starts a group
    const auto [g0, g1] = h.exact(row, out + row, rows > 0);
    for (int64_t r = g0; r < g1; ++r) exact.offer(out[r]);
    rows += g1 - g0;
    raise_floor(cg.screen_best, exact.bar());
  };
  for (int64_t i = 0; i < first; ++i) {
    if (i + 1 < first) h.prefetch(cand[i + 1].row);
    if (cand[i].upper >= cg.screen_best.load(std::memory_order_relaxed)) compute(cand[i].row);
  }
  TopkExchange shared(c, k);
  shared.publish(exact);
  auto next = [&](int64_t from) {
    shared.poll();
    const float b = std::max(bar, cg.screen_best.load(std::memory_order_relaxed));
    while (from < kept && !(cand[from].upper >= b)) ++from;
    return from;
  };
  for (int64_t i = next(first), j; i < kept; i = j) {
    j = next(i + 1);
    if (j < kept) h.prefetch(cand[j].row);
    compute(cand[i].row);
  }
  cg.screen_rows += rows;
  if (c.tid == 0) cg.screen_ran = true;
}

}  // namespace hearth::cpu
