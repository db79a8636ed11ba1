// The LM head of one token read through its screen (head_screen.h): for greedy decoding only the
// rows that can be the argmax, for top-k sampling only those that can be among the k largest, are
// computed from the head itself. Layout: the head's rows as the matmuls read them (the model's, or
// the packed or coded copy), its screen as head_screen.h describes, one thread per contiguous row
// range.
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
// group's rows lie where the rows would (kernels.h PackShape); split: a Q8 head is read from its
// screen and low bits.
void prefetch_group(const Tensor& w, WeightCopy copy, const HeadScreen* split, bool panel,
                    int64_t g0, int64_t n) {
  const void* w_il = copy.il;
  if (copy.exc) {  // a coded group, and where its exceptions start
    const int64_t gb = coded_group_bytes(w.cols()), g = g0 / kCodedRows;
    const char* group = static_cast<const char*>(w_il) + g * gb;
    for (int64_t i = 0; i < gb; i += 64) prefetch_line(group + i);
    const CodedBf16 v = coded_bf16_view(w_il, copy.exc, w.rows());
    prefetch_line(v.exc_off + g);
    prefetch_line(v.exc + v.exc_off[g]);
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
        copy{c.cg.w_il[size_t(s.parts[0].w)], c.cg.w_exc[size_t(s.parts[0].w)]},
        x(x),
        K(w.cols()),
        split(reads_split(c.cg, w, copy.il)),
        panel(copy.il && reads_q8_panel(c.kt, w)),
        group(copy.il && (w.dtype == DType::BF16 || panel) ? kQ4PanelRows : 4) {
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
  void screen(int64_t r, int64_t r1, bool reuse) const { screen(r, r1, reuse, tmp, hw); }
  // The same into est and bound.
  void screen(int64_t r, int64_t r1, bool reuse, float* est, float* bound) const {
    if (hs.hi) {
      ScreenQ8Args a{hs.hi, w.scales, w.scale_dtype, w.group_size,   x,    K, r,
                     r1,    est,      bound,         screen_scratch, reuse};
      c.kt.screen_q8(a);
    } else {
      matmul_rows(c, hs.q8, hs.w_il, x, 1, r, r1, est, epilogue_rows(1), e, reuse);
      for (int64_t i = 0; i < r1 - r; ++i) bound[i] = screen_bound(in, hs, r + i);
    }
  }
  // Whether estimates can be refined by the low bits alone (place_screen keeps room for them
  // where this graph reads a split Q8 head and the ISA has refine_q8_split).
  bool refines() const { return c.cg.screen_est.p != nullptr; }
  // The 4-row group at g0 (its rows' screen estimates since the screen's call on this token):
  // what to add to them (KernelTable::refine_q8_split), next the group refined after it or -1.
  void refine(int64_t g0, int64_t next, float* corr) const {
    c.kt.refine_q8_split(
        {hs.lo, w.scales, w.scale_dtype, w.group_size, K, g0, screen_scratch, corr, next});
  }

  // The head's own logits of the group holding row r (clipped to the range) into y[g0 - r0...]
  // where [g0, g1) is the group, returned. Groups are the whole head's: 4 rows, or 16 for a packed
  // BF16 head (its kernel sums 16 rows at once, each in column order) and a Q8 one in panels, so
  // each row's logit is the one the whole head gives.
  std::pair<int64_t, int64_t> exact(int64_t r, float* y, bool reuse) const {
    const int64_t g0 = r / group * group, g1 = std::min(g0 + group, e);
    matmul_rows(c, w, copy, x, 1, g0, g1, y, group, 0, reuse);
    return {g0, g1};
  }
  void prefetch(int64_t r) const {
    prefetch_group(w, copy, split ? &hs : nullptr, panel, r / group * group, group);
  }

  const StepCtx& c;
  const HeadScreen& hs;
  const Tensor& w;
  const WeightCopy copy;  // the head's copy (packed, panels or coded) and a coded one's exceptions
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
    if (v > bar_) insert(v);
  }
  float bar() const { return bar_; }
  const std::vector<float>& values() const { return heap_; }

 private:
  // Out of line: a screen's loop over every row of the head offers each, and keeps little in
  // registers with the heap's code inlined in it.
  __attribute__((noinline)) void insert(float v) {
    heap_.push_back(v);
    std::push_heap(heap_.begin(), heap_.end(), std::greater<float>());
    if (heap_.size() > k_) {
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<float>());
      heap_.pop_back();
    }
    if (heap_.size() == k_) bar_ = heap_.front();
  }

  size_t k_;
  std::vector<float> heap_;
  float bar_ = -INFINITY;
};

// The threads' exchange of the k largest of their first exact logits or refined lower bounds
// (CpuCompiled::topk_shared): a thread's own floor reaches at most its range's k-th largest, the
// whole head's is the k-th largest of all the ranges' values, and with each at its own range's two
// threads computed 44% more head rows than one (0.6B INT4 stand-in, top-k 20). Nothing waits: a
// thread merges what others have published, before its own too.
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

namespace {

// A thread's top-k candidates: the 4-row groups of its range (the head's groups where they are
// larger) whose screen upper bound reaches the k-th largest of its rows' screen lower bounds, that
// bar, and where the estimates and bounds of every row are kept (refining heads) or null.
struct TopkCandidates {
  int64_t n = 0;
  float bar = -INFINITY;
  const float* est = nullptr;
  const float* hw = nullptr;
};

TopkCandidates screen_topk(const ScreenedHead& h, int k) {
  const int64_t b = h.b, e = h.e, br = epilogue_rows(1);
  TopkCandidates tc;
  float* est = nullptr;  // every row's, or each block's in turn
  if (h.refines()) {
    est = h.c.cg.screen_est.f() + size_t(h.c.tid) * 2 * size_t(h.c.cg.screen_cap);
    tc.est = est, tc.hw = est + h.c.cg.screen_cap;
  }
  KthLargest screened(k);
  for (int64_t r = b; r < e; r += br) {
    const int64_t r1 = std::min(e, r + br);
    float* v = est ? est + (r - b) : h.tmp;
    float* w = est ? est + h.c.cg.screen_cap + (r - b) : h.hw;
    h.screen(r, r1, r > b, v, w);
    // (Not screen_select: it raises the bar to the best lower bound, the argmax's.)
    const int64_t n = r1 - r;
    float bar = screened.bar();
    for (int64_t g = 0; g < n; g += h.group) {
      const int64_t g1 = std::min(n, g + h.group);
      float up = -INFINITY;
      for (int64_t i = g; i < g1; ++i) {
        const float low = v[i] - w[i], high = v[i] + w[i];
        if (low > bar) screened.offer(low), bar = screened.bar();
        up = high > up ? high : up;  // NaN: keeps up
      }
      if (up >= bar) h.cand[tc.n++] = {int32_t(r + g), up};
    }
  }
  tc.bar = raise_floor(h.c.cg.screen_best, screened.bar());
  int64_t kept = 0;
  for (int64_t i = 0; i < tc.n; ++i)
    if (h.cand[i].upper >= tc.bar) h.cand[kept++] = h.cand[i];
  tc.n = kept;
  return tc;
}

// Moves the k candidates of the highest upper bounds first, rows enough for k several times over,
// so that the next bar starts near the k-th logit (a selection: sorting thousands of candidates
// cost 5% of a 0.6B INT4 decode), and returns how many that is.
int64_t select_first(const ScreenedHead& h, const TopkCandidates& tc, int k) {
  const int64_t first = std::min<int64_t>(tc.n, k);
  std::nth_element(
      h.cand, h.cand + first, h.cand + tc.n,
      [](const ScreenCandidate& a, const ScreenCandidate& z) { return a.upper > z.upper; });
  return first;
}

// Visits candidates [first, n), each that still reaches the floor (the highest of `bar` and what
// every thread proved) when its turn comes, prefetching the next meanwhile: visit(i, j) with j the
// next to visit (n if none); poll() runs before each look at the floor.
template <class Poll, class Prefetch, class Visit>
void each_reaching_floor(const ScreenedHead& h, int64_t first, int64_t n, float bar, Poll&& poll,
                         Prefetch&& prefetch, Visit&& visit) {
  auto next = [&](int64_t from) {
    poll();
    const float floor = std::max(bar, h.c.cg.screen_best.load(std::memory_order_relaxed));
    while (from < n && !(h.cand[from].upper >= floor)) ++from;
    return from;
  };
  for (int64_t i = next(first), j; i < n; i = j) {
    j = next(i + 1);
    if (j < n) prefetch(h.cand[j].row);
    visit(i, j);
  }
}

// The candidates' exact logits: first the k of the highest upper bounds, whose k-th largest logit
// is the next bar, then in any order every other that still reaches it.
int64_t topk_exact(const StepCtx& c, const ScreenedHead& h, const TopkCandidates& tc, int k,
                   float* out) {
  KthLargest exact(k);
  int64_t rows = 0;
  auto compute = [&](int64_t i, int64_t) {
    const int64_t row = h.cand[i].row;  // starts a group
    const auto [g0, g1] = h.exact(row, out + row, rows > 0);
    for (int64_t r = g0; r < g1; ++r) exact.offer(out[r]);
    rows += g1 - g0;
    raise_floor(c.cg.screen_best, exact.bar());
  };
  const int64_t first = select_first(h, tc, k);
  TopkExchange shared(c, k);
  auto poll = [&] { shared.poll(); };
  auto prefetch = [&](int64_t row) { h.prefetch(row); };
  each_reaching_floor(h, 0, first, tc.bar, poll, prefetch, compute);
  shared.publish(exact);
  each_reaching_floor(h, first, tc.n, tc.bar, poll, prefetch, compute);
  return rows;
}

// A split Q8 head's candidates refined by their low bits alone (refine_q8_split: within the
// rounding of the logit), in topk_exact's order, the k-th largest refined lower bound the next
// bar; then the exact logits of only the groups whose refined upper bound reaches the final floor
// (the k largest and their near ties). Returns the rows computed exactly.
int64_t topk_refined(const StepCtx& c, const ScreenedHead& h, const TopkCandidates& tc, int k,
                     float* out) {
  const int64_t nc = h.K / 128;
  KthLargest lower(k);
  int64_t refined = 0;
  // The group's upper bound becomes its refined one; the kernel prefetches the next group's.
  auto refine = [&](int64_t i, int64_t next) {
    const int64_t g0 = h.cand[i].row, g1 = std::min(g0 + 4, h.e);
    float corr[4];
    h.refine(g0, next < tc.n ? h.cand[next].row : -1, corr);
    float up = -INFINITY;
    for (int64_t r = g0; r < g1; ++r) {
      const float v = tc.est[r - h.b] + corr[r - g0], d = refined_bound(tc.hw[r - h.b], nc);
      lower.offer(v - d);
      up = std::max(up, v + d);  // NaN: keeps up
    }
    h.cand[i].upper = up;
    refined += g1 - g0;
    raise_floor(c.cg.screen_best, lower.bar());
  };
  const int64_t first = select_first(h, tc, k);
  TopkExchange shared(c, k);
  auto poll = [&] { shared.poll(); };
  auto in_kernel = [](int64_t) {};
  each_reaching_floor(h, 0, first, tc.bar, poll, in_kernel, refine);
  shared.publish(lower);
  each_reaching_floor(h, first, tc.n, tc.bar, poll, in_kernel, refine);
  c.cg.screen_low_rows += refined;
  // Groups passed over kept their screen bound, below the floor then and so now.
  int64_t rows = 0;
  auto compute = [&](int64_t i, int64_t) {
    const int64_t row = h.cand[i].row;
    const auto [g0, g1] = h.exact(row, out + row, rows > 0);
    rows += g1 - g0;
  };
  auto prefetch = [&](int64_t row) { h.prefetch(row); };
  each_reaching_floor(h, 0, tc.n, tc.bar, poll, prefetch, compute);
  return rows;
}

}  // namespace

// Top-k sampling's LM head of one token (StepInputs::top_k): rows get their exact logits where
// they can be among the k largest of the whole head, -inf elsewhere, so the k largest and
// everything tied with the k-th are exact. Bars, each the k-th largest of k distinct rows' lower
// bounds or values and so a proof that any row whose upper bound is below it has k rows above it:
// first the screen's lower bounds of a thread's range, then the exact logits it computed so far,
// or, for a split Q8 head, its estimates refined by the low bits. Each is a floor under the whole
// head's k-th largest, so every thread prunes against the highest any thread has reached
// (screen_best, TopkExchange). Candidates are the head's own groups (ScreenedHead::exact), so
// each logit is the one the whole head gives.
void topk_screened(const StepCtx& c, const LinearStep& s, const float* x, int k, float* out) {
  const ScreenedHead h(c, s, x);
  std::fill(out + h.b, out + h.e, -INFINITY);
  const TopkCandidates tc = screen_topk(h, k);
  c.cg.screen_rows += tc.est ? topk_refined(c, h, tc, k, out) : topk_exact(c, h, tc, k, out);
  if (c.tid == 0) c.cg.screen_ran = true;
}

}  // namespace hearth::cpu
