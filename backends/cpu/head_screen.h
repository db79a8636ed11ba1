// A greedy LM head that reads part of the head per token and still returns the argmax the whole
// head gives, bit for bit. A smaller copy of the head (the screen) estimates every row's logit;
// per-row bounds on how far an estimate can be from the head's own logit prove that most rows
// cannot be the largest, and only the 4-row groups of the others are computed from the head
// itself, with the same kernel and in the same groups as the whole head would be.
//
// A BF16 head's screen is a Q8 copy (group 32, F16 scales), 0.53x its bytes. The bound, for a row
// w with Q8 copy w' and activations x with int8 copy x' (what the Q8 kernel multiplies; block
// scale d = amax / 127, so |x - x'| <= d / 2 per element):
//   |x.w - x'.w'| <= |(x - x').w| + |x'.(w - w')|
//                 <= sum_b |x_b - x'_b| |w_b| + sum_b |x'_b| |w_b - w'_b|      (Cauchy-Schwarz)
//                 <= X2 M + X1 E
// with X2 = sum_b |x_b - x'_b|, X1 = sum_b |x'_b| per token and M = max_b |w_b|, E = max_b
// |w_b - w'_b| per row (b: blocks of 32, |.| the 2-norm), plus a margin for the f32 rounding of
// both dot products. On the random stand-ins it leaves ~330 rows of 151,936 to compute at hidden
// size 1024 and 1200-1800 at 2048.
//
// A Q8 head's screen is the high B = 5 bits of its codes, 0.625x their bytes, read with the head's
// own scales. Each code q splits as q = 8h + l with h = q >> 3 in [-16, 15] and l in [0, 7]; the
// screen's logit takes l as 3.5, so with x' the int8 activations the Q8 kernel multiplies (block
// scale d_b) and s_b the row's weight scale of block b:
//   |logit - estimate| = |sum_b s_b d_b sum_i (l_i - 3.5) x'_i| <= 3.5 sum_b |s_b| d_b sum_i |x'_i|
// plus the f32 rounding of both sums, each at most (chunks + 6) 2^-24 of 128 times that sum
// (|q| and |8h + 3.5| are at most 128): the kernel returns hw = (3.5 + (chunks + 8) 2^-15) times
// it. That bound alone leaves ~1000 rows of 151,936 to compute on the random 0.6B stand-in, but the
// largest logit computed so far rules out every row whose upper bound is below it, and on the
// model's own activations ~100 groups of 4 rows remain. (4 bits: 3.5 standard deviations of the
// logits wide, ~30% of the rows left; 6 bits: ~15 groups left for 0.75x the bytes.)
// Layout: per 4-row group, per 128-element chunk, per row, 80 bytes for the chunk's two 64-code
// halves (slot order, quant/FORMAT.md), u = h + 16 in [0, 31] per code: 64 bytes of low nibbles,
// byte p holding slot p of half 0 in its low nibble and of half 1 in its high nibble (as Q4 codes
// are), then 16 bytes of high bits (the 16s of u), bit 4 h + q of byte m for slot 16 q + m of half
// h. A 16-byte lane of nibbles then finds its high bits at one bit position of the 16 bytes,
// broadcast: a shift by a per-lane amount puts them at bit 4 of each byte, so every ISA reads the
// screen with masks, shifts and ors.
//
// A row's low bits alone then refine its estimate (KernelTable::refine_q8_split): per lane, the
// kernel adds f (x' . l - kScreenMid sum x') to the screen's f (kStep x' . h + kScreenMid sum x'),
// with the same lane scale f, which in exact arithmetic is the Q8 kernel's f x' . q. What remains
// is f32 rounding: of the screen's sums, the kernel's and the refinement's, each at most (chunks +
// 6) 2^-24 of the sum of its terms' magnitudes (128 S, 128 S and 3.5 S, S = sum |f| sum |x'|), and
// of the final addition: at most 260 (chunks + 8) 2^-24 S, about half of the (chunks + 8) 2^-15 S
// that refined_bound allows with S < hw / 3.5. Top-k sampling with a screen of 5 bits leaves every
// row near the k-th largest logit (~10% of a random 0.6B's rows) to compute; refined, only those
// within the rounding of it, so most of those rows are read as 48 bytes of low bits a chunk
// instead of 128 of codes.
//
// Where a kernel multiplies it (KernelTable::matmul_q8_split) and the screen would be a large part
// of the weights (WeightPlacer::keeps_split), a Q8 head is kept as its screen and
// the low 3 bits of its codes beside it, not as a copy of the codes as well: the two hold exactly
// the head's bytes, and one-token steps (decode, a prefill's last row) read their exact rows from
// them; only steps of several rows of logits (batched decode, `logits`-style callers) read panels
// of the codes, copied when the first of them is compiled. Low bits, per 4-row group, per chunk,
// per row, 48 bytes: 32 bytes holding l & 3 of slot 32 c + m of half h at bits 2 (2 h + c) of byte
// m, then 16 bytes holding l >> 2 at bit 4 h + q of byte m for slot 16 q + m of half h, as the
// screen's high bits. So 8 u + l = q + 128, the unsigned code vpdpbusd takes.
//
// A BF16 head keeps its copy (coded where a kernel reads it so: bf16_coded.h) beside its screen,
// and the screen's candidates are computed from the copy's whole 16-row groups.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "backends/cpu/kernels.h"
#include "core/backend.h"
#include "core/tensor.h"

namespace hearth::cpu {

struct HeadScreen {
  // A BF16 head's:
  Tensor q8;                      // the Q8 copy; with w_il its codes are only the panels
  const void* w_il = nullptr;     // panels (ScreenLayout) for matmul_q8, or null
  const float* bounds = nullptr;  // per row kScreenBounds floats {M, E, N}: N = |w| for rounding
  // A Q8 head's: the high bits of its codes (KernelTable::screen_q8 reads them), else null, and
  // their low bits where the head is read from the two (KernelTable::matmul_q8_split), else null.
  const uint8_t* hi = nullptr;
  const uint8_t* lo = nullptr;
};
constexpr int kScreenBounds = 3;
constexpr int kScreenQ8Bits = 5;                          // the layout above holds 4 + 1 bits
constexpr int64_t kScreenQ8ChunkBytes = 80;               // per row and 128-element chunk
constexpr int64_t kScreenLowChunkBytes = 48;              // the low bits', the same
constexpr int kScreenStep = 1 << (8 - kScreenQ8Bits);     // q = kScreenStep h + l, l in [0, 8)
constexpr float kScreenMid = float(kScreenStep - 1) / 2;  // what the screen takes l as
constexpr int kScreenOffsetLog2 = kScreenQ8Bits - 1;      // u = h + 16

// What a Q8 screen kernel (screen_q8_*.cpp) derives from one token: the int8 activations in slot
// order (as that ISA's Q8 kernel quantizes them) and their block scales, and per 128-element chunk
// three vectors of `lanes` lanes (lane i covers block i mod 4): -16 sum x' (so a dot on u = h + 16
// starting there yields sum h x' exactly), kScreenMid sum x' and sum |x'|.
struct ScreenToken {
  const int8_t* q;
  const float* d;
  int32_t* init;
  float* mid;
  float* abs;
};
// The three per-chunk arrays carved from `rest`, the scratch after the activation tile.
inline ScreenToken screen_token(const int8_t* q, const float* d, float* rest, int64_t chunks,
                                int lanes) {
  return {q, d, reinterpret_cast<int32_t*>(rest), rest + lanes * chunks, rest + 2 * lanes * chunks};
}

// The most a Q8 kernel's logit can differ from a screen estimate refined by its low bits, given the
// screen's bound hw on the estimate alone (see above).
inline float refined_bound(float hw, int64_t chunks) {
  return hw * (float(chunks + 8) / (32768.f * kScreenMid));
}

// What screening saved, for the bench's bytes per token: the head's bytes against the screen's,
// the head rows computed exactly over the screened steps, and the steps that could have been
// screened but read the whole head (ScreenPolicy).
struct ScreenStats {
  std::atomic<int64_t> steps{0}, exact_rows{0}, whole_steps{0};
  std::atomic<int64_t> low_rows{0};  // rows refined by their low bits (refine_q8_split)
  double head_bytes = 0, screen_bytes = 0, row_bytes = 0, low_row_bytes = 0;
};

// Whether the next one-token head step of a mode (0 greedy, 1 top-k) goes through the screen. How
// many rows a screen leaves depends on the model, the mode and the text (on a random 30B-A3B
// slice's Q8 head with top-k 20, a third of the head's bytes, read 4 rows at a time: slower than
// the whole head), and what a scattered row costs against a streamed one depends on the machine.
// So the two are timed in turns: kWindow steps screened, kWindow whole, then the faster (by
// median) for kHold steps, then both again. The logits are the same either way.
class ScreenPolicy {
 public:
  static constexpr int kWindow = 8, kHold = 256;
  using Rule = CpuOptions::Screen;
  explicit ScreenPolicy(Rule rule = Rule::Timed) : rule_(rule) {}

  bool use(int mode) const {
    const Mode& m = modes_[mode];
    return rule_ == Rule::Always ||
           (rule_ == Rule::Timed && (m.phase == 2 ? m.screen : m.phase == 0));
  }
  // The head of a step of `mode`, screened or not as use() said, took `ns`.
  void record(int mode, int64_t ns);

 private:
  struct Mode {
    int phase = 0;  // 0: timing screened steps, 1: whole ones, 2: holding the faster
    int n = 0;
    int64_t ns[2][kWindow] = {};
    bool screen = true;
  };
  Rule rule_;
  Mode modes_[2];
};
// Whether build_head_screen takes this weight: BF16 (the kernels' 16-bit head) with k a multiple
// of 32, or Q8 without a codebook with k a multiple of 128 and rows of 4.
bool screenable(const Tensor& w);
// Bytes build_head_screen writes for w (with_low: a Q8 head's low bits too).
size_t head_screen_bytes(const Tensor& w, bool with_low = false);
// Bytes the screen reads per token (a Q8 head's scales too).
size_t head_screen_read_bytes(const Tensor& w);
// How a BF16 head's Q8 copy lies for the matmul_q8 that reads it: rows as they are, or 16-row
// panels with their scales (q8_panel.h, rows a multiple of 16, over the codes' and scales' bytes).
enum class ScreenLayout { kRows, kPanel };
constexpr int64_t kScreenGroup = 32;  // the Q8 copy's group size
// Writes rows [r0, r1) of the screen of w into dst (head_screen_bytes(w) bytes, 64-byte aligned),
// so that threads can share the work (r0 a multiple of 16). A Q8 head's screen is always in 4-row
// groups, whatever `layout`; with_low: a Q8 head's low bits after them. A BF16 head's rows are
// quantized by row_fn (KernelTable::screen_row_bf16; null: the baseline ISA's).
void build_head_screen(const Tensor& w, ScreenLayout layout, void* dst, int64_t r0, int64_t r1,
                       bool with_low = false, ScreenRowFn row_fn = nullptr);
// The screen build_head_screen wrote at dst.
HeadScreen head_screen_view(const Tensor& w, ScreenLayout layout, const void* dst,
                            bool with_low = false);
// Row `row` of a Q8 head's codes (slot order, as stored) from its high and low bits.
void split_row_codes(const HeadScreen& s, int64_t k, int64_t row, int8_t* codes);
// out[t] = rows[t] of a Q8 head kept as its screen and low bits (w: its scales), dequantized to
// f32, for t in [t0, t1): a tied head's Embed step.
void embed_split_rows(const Tensor& w, const HeadScreen& s, const int32_t* rows, float* out,
                      int64_t t0, int64_t t1);

// Per token: the sums X1 and X2 of the header and |x|, from the activations the head multiplies.
struct ScreenInput {
  float x1 = 0, x2 = 0, norm = 0;
};
ScreenInput screen_input(const float* x, int64_t k);
// The largest |head logit - screen logit| row `row` of the screen can have.
inline float screen_bound(const ScreenInput& in, const HeadScreen& s, int64_t row) {
  const float* b = s.bounds + kScreenBounds * row;
  const int64_t k = s.q8.cols();
  // f32 rounding: each dot accumulates at most k products of magnitude summing to at most
  // |x| N (and X1 (M + E) for the screen), with a relative error of k x 2^-24 at worst; 2^-22
  // doubles that.
  const float margin = (float(k) * in.norm * b[2] + float(k / 32 + 8) * in.x1 * (b[0] + b[1])) *
                       (1.f / float(1 << 22));
  return in.x2 * b[0] + in.x1 * b[1] + margin;
}

}  // namespace hearth::cpu
