// The CPU kernel table: one function pointer per (op, element type), filled at start-up from the
// ISA chosen by detection. Scalar kernels fill every slot; each ISA level overrides what it speeds
// up. Kernels never allocate and never synchronise: the backend splits work and places barriers.
#pragma once
#include <cmath>
#include <cstdint>

#include "backends/cpu/bf16_coded.h"
#include "backends/cpu/cpu_features.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace hearth::cpu {

// y[t*ldy + (r - r0)] = dot(x[t*ldx .. +k], W[r*k .. +k]) for t < n_tokens and r in [r0, r1):
// y points at row r0's output. W is row-major [rows, k] in its stored type; x and y are f32. Every
// ISA reads each weight row once per call however many tokens there are (tokens are the inner
// loop), and may prefetch ahead in address order up to row `prefetch_r1` (>= r1; 0 means r1),
// which lets a caller that walks a matrix in blocks keep one prefetch stream running.
struct MatmulArgs {
  const void* w;
  int64_t k;
  const float* x;
  int64_t ldx;
  int n_tokens;
  float* y;
  int64_t ldy;
  int64_t r0, r1;
  float* scratch;  // per-thread, at least k * max(n_tokens, 1) floats (widened rows, reordered x)
  int64_t prefetch_r1 = 0;
  // Or null: the backend's copy of the weight, which the kernel reads instead of w for whole
  // groups of rows (other kernels ignore it): BF16 packed by pack_rows (kPackBf16, AVX-512 and
  // AVX2 kernels); Q4 (with or without a codebook) and Q8 as 16-row panels with their scales
  // (q4_panel.h, q8_panel.h) where KernelTable::q4_panel and q8_panel say so.
  const void* w_il = nullptr;
};

// Weights packed for decode: rows in groups of `rows` (the rows a decode kernel reads side by
// side), and within a group their chunks of `chunk` bytes side by side, so row r's chunk c starts
// at byte ((r / rows) * (row_bytes / chunk) + c) * rows * chunk + (r % rows) * chunk (a group's
// rows start where they did). A block of rows is then one stream in address order instead of
// several interleaved ones, which Zen 5 reads 10-16% faster. Needs a whole number of groups and
// of chunks per row. (Quantized weights have panels instead: q4_panel.h, q8_panel.h.)
struct PackShape {
  int64_t chunk, rows;
};
// BF16: 16 rows' pairs of columns (2c, 2c + 1) in one 64-byte line, the line the AVX-512 kernel
// widens to 16 rows' products (matmul_avx512.h, rows_bf16_packed; AVX2 by halves, matmul_avx2.h).
constexpr PackShape kPackBf16{4, 16};
inline bool pack_fits(PackShape p, int64_t rows, int64_t row_bytes) {
  return rows % p.rows == 0 && row_bytes % p.chunk == 0;
}
void pack_rows(const void* w, int64_t rows, int64_t row_bytes, PackShape p, void* out);
// Rows [r0, r1) against groups of `rows`: [g0, g1) are whole groups, read from the packed copy;
// [r0, g0) and [g1, r1) are not and are read from w. g0 == g1 == r1 when there is no whole group.
struct WholeGroups {
  int64_t g0, g1;
};
inline WholeGroups whole_groups(int64_t r0, int64_t r1, int64_t rows) {
  const int64_t g0 = (r0 + rows - 1) / rows * rows, g1 = r1 / rows * rows;
  return g0 < g1 ? WholeGroups{g0, g1} : WholeGroups{r1, r1};
}
// Rows [r0, r0 + n) of a packed weight back to row-major (for the GEMM libraries).
void unpack_rows(const void* packed, int64_t r0, int64_t n, int64_t row_bytes, PackShape p,
                 void* out);
using MatmulFn = void (*)(const MatmulArgs&);

// Q8/Q4 weights (layout in quant/FORMAT.md): w points at the codes, scales at [rows, k / group]
// scales of scale_dtype (F16 or BF16). k is a multiple of 32 and of group.
struct QuantMatmulArgs : MatmulArgs {
  const void* scales = nullptr;
  DType scale_dtype = DType::F16;
  int group = 0;
  const int8_t* codebook = nullptr;  // Q4 with a codebook (matmul_q4cb): the 16 levels
  // A hint from a caller that walks matrices in blocks: x, k, n_tokens and scratch are unchanged
  // since this thread's previous call to the same kernel (same type, same codebook use), so what
  // that call derived from x (int8 or bf16 activations, offset lanes) may be reused. Quantizing
  // the activations again for every 64-row block cost about a tenth of a 0.6B INT4 decode.
  bool reuse_x = false;
  // Many tokens: x already quantized by quant_act (every token's int8 codes [n_tokens][k] in
  // element order, block scales and code sums [n_tokens][k / 32]), shared by the threads of a step.
  // Null: the kernel quantizes x itself.
  const int8_t* xq = nullptr;
  const float* xd = nullptr;
  const int32_t* xsum = nullptr;
};
using QuantMatmulFn = void (*)(const QuantMatmulArgs&);
// From this many tokens on, kernels with KernelTable::quant_prefill take their int8 GEMM path,
// which reads QuantMatmulArgs::xq when given. Below it, the decode kernels unpack each chunk once
// for up to four tokens (batched decode): at 8 and 16 sequences they beat the GEMM, which repacks
// its weight panels on every call; the two cross near 24 tokens (bench/RESULTS.md, "batched steps
// up to 31 tokens" and "An int8 prefill GEMM for AVX-VNNI"). At most kTokenTile (32): the decode
// kernels quantize every token of a step at once.
constexpr int kQuantGemmMinTokens = 32;
// One token's activations to int8 per 32-element block for the kernels' prefill GEMM: codes in
// element order (x * 127 / amax rounded to nearest even), block scales amax / 127, code sums.
using QuantActFn = void (*)(const float* x, int64_t k, int8_t* q, float* d, int32_t* sum);
// Rows [r0, r0 + n) of a Q8/Q4 weight w (k = w.cols()) dequantized into dst [n, k] in element
// order, as f32, or as bf16 bits when bf16: the library GEMMs take these for prefill.
using QuantDequantFn = void (*)(const Tensor& w, int64_t r0, int64_t n, void* dst, bool bf16);
// Per-thread scratch (floats) of the quantized matmuls for steps of up to max_tokens tokens:
// decode quantizes up to 32 tokens of activations to int8 (about 10 k floats) and keeps block
// factors for 8 rows and the codes' offset lanes (k / 8 per token); prefill holds every token's
// int8 activations (1.25 bytes per element with their block scales) and a panel of 32 repacked rows
// (36 bytes per column).
inline int64_t quant_matmul_scratch_floats(int64_t k, int max_tokens) {
  const int64_t decode = 14 * k + 2048;
  const int64_t prefill = 9 * k + 5 * int64_t(max_tokens) * k / 16 + 256;
  return decode > prefill ? decode : prefill;
}

// Causal softmax attention of one KV head for n_tok consecutive tokens and the `group` query heads
// that share it. Query head j of token t is at q + t*q_stride + j*head_dim, its result goes to
// out + t*out_stride + j*head_dim, and it sees cache positions [0, pos0 + t + 1). k and v are the
// head's cache rows [position][head_dim] in the cache's type, contiguous or paged (KVPaging).
// Online softmax over key tiles, so no score matrix larger than a tile ever exists.
//
// A long context can be split over positions: rows then see only [kv_begin, kv_end) of what they
// would see, and with ml set each result is left unnormalised (the sum of exp(s - m) v) and
// ml[2 * (t * group + j)] gets {m, l}, the row's maximum score and sum of exp(s - m), for the
// caller to merge the ranges.
// Where a paged cache keeps position p: row p % block_size of block b = blocks[p / block_size], at
// b * block_stride + (b >> extent_shift) * extent_skip bytes from the head's base in block 0, so a
// head's rows (and an I8 cache's scales) of consecutive blocks in one extent of 2^extent_shift
// blocks are block_stride apart, and each extent starts extent_skip bytes further on (CpuKVStorage:
// a head's rows of an extent are one run). Without blocks the rows are contiguous. Kernels never
// let a key tile cross a block (run()).
struct KVPaging {
  const int32_t* blocks = nullptr;
  int block_size = 0;
  int64_t block_stride = 0;
  int extent_shift = 0;
  int64_t extent_skip = 0;
  int64_t offset(int p, int64_t row_bytes) const {
    if (!blocks) return int64_t(p) * row_bytes;
    const int64_t b = blocks[p / block_size];
    return b * block_stride + (b >> extent_shift) * extent_skip +
           int64_t(p % block_size) * row_bytes;
  }
  const void* row(const void* base, int p, int64_t row_bytes) const {
    return static_cast<const char*>(base) + offset(p, row_bytes);
  }
  // Positions from p to the end of p's block.
  int run(int p) const { return blocks ? block_size - p % block_size : 1 << 30; }
};

struct AttentionArgs {
  const float* q;
  int64_t q_stride;
  float* out;
  int64_t out_stride;
  int n_tok;
  int group;
  int pos0;
  const void* k;
  const void* v;
  int head_dim;
  float scale;
  float* scratch;  // per-thread, at least attention_scratch_floats(head_dim) floats
  int kv_begin = 0;
  int kv_end = 1 << 30;
  float* ml = nullptr;
  // Decode: the first K and V rows the caller attends next (the next KV head's, already through
  // its own paging), prefetched during this call's last tile; null for none.
  const void* next_k = nullptr;
  const void* next_v = nullptr;
  // I8 caches: element d of position p is code * scale[p], times k_factor[d] for keys (ops.h,
  // quantize_kv_row); AVX-512 decode rounds the query to 16 bits against them (round_query16).
  const float* k_scale = nullptr;
  const float* v_scale = nullptr;
  const float* k_factor = nullptr;
  // k, v, k_scale and v_scale are the head's rows in block 0 of a paged cache.
  KVPaging paging = {};
};
using AttentionFn = void (*)(const AttentionArgs&);

// Scratch an attention kernel needs: query-row state and one key tile of scores, with headroom.
constexpr int64_t kAttnRowsPerBlock = 16;  // query rows (tokens x group) handled together
constexpr int64_t kAttnKeyTile = 64;       // positions per key tile
inline int64_t attention_scratch_floats(int64_t head_dim) {
  constexpr int64_t R = 2 * kAttnRowsPerBlock;  // up to a transposed block (attention_scratch.h)
  return R * (2 * head_dim + 2) + kAttnKeyTile * (R + 2 * head_dim) + kAttnRowsPerBlock * head_dim +
         64;
}

// out[i] = silu(a[i]) * b[i] for i < n.
using SiluMulFn = void (*)(const float* a, const float* b, float* out, int64_t n);
// out = x / sqrt(mean(x^2) + eps) * w over n values (out may be x). The sum of squares is taken in
// double, as the reference does: rows reach 4096 values and the fixtures are float64.
using RmsNormFn = void (*)(const float* x, const float* w, int64_t n, float eps, float* out);
// Widens n values of a weight type to f32 (a GEMM's weight block).
using WidenFn = void (*)(const void* src, float* dst, int64_t n);
// Rounds n floats to bf16 (round to nearest even; AVX-512's vcvtneps2bf16 takes f32 subnormals as
// zero), for a BF16 GEMM's input and a BF16 KV cache.
using ToBf16Fn = void (*)(const float* x, uint16_t* out, int64_t n);
// Rounds n floats to f16 bits as f32_to_f16 does (to nearest even, inf past 65504), for an F16 KV
// cache; a NaN stays a NaN (its payload may differ).
using ToF16Fn = void (*)(const float* x, uint16_t* out, int64_t n);
// One row of an I8 KV cache: quantize_kv_row (ops.h), bit for bit.
using QuantizeKvRowFn = void (*)(const float* x, const float* factor, int64_t n, int8_t* codes,
                                 float* scale);
// Machine probes for `hearth bench`: the sum of n floats (64-byte aligned, n a multiple of 64) read
// at full vector width, for memory bandwidth; and `iters` rounds of independent FMAs, returning a
// value that depends on all of them and setting *flops to the floating-point operations done.
using ReadSumFn = float (*)(const float* x, int64_t n);
using FmaLoopFn = float (*)(int64_t iters, double* flops);

// The screen of a Q8 LM head (head_screen.h) against one token x: for rows [r0, r1) (both
// multiples of 4), est[i] estimates row r0 + i's logit and hw[i] is the most the Q8 kernels'
// logit of that row can differ from it. scales are the head's own.
struct ScreenQ8Args {
  const uint8_t* codes;
  const void* scales;
  DType scale_dtype;
  int group;
  const float* x;
  int64_t k;
  int64_t r0, r1;
  float* est;
  float* hw;
  float* scratch;        // per thread, quant_matmul_scratch_floats(k, 1) floats
  bool reuse_x = false;  // as QuantMatmulArgs::reuse_x, between calls of this kernel
};
using ScreenQ8Fn = void (*)(const ScreenQ8Args&);
// A Q8 head kept as its screen and low bits (head_screen.h), after the screen's call on the same
// token and scratch: corr[i] is row `row` + i's logit less the screen's estimate of it, from the
// low bits alone, for the 4-row group at `row`; est + corr is then the Q8 kernels' logit within
// refined_bound(hw).
struct RefineQ8Args {
  const uint8_t* lo;  // HeadScreen::lo
  const void* scales;
  DType scale_dtype;
  int group;
  int64_t k;
  int64_t row;     // a multiple of 4
  float* scratch;  // ScreenQ8Args::scratch, as the screen left it
  float* corr;     // 4 floats
  // The group refined next (its low bits and scales prefetched a chunk at a time), or -1.
  int64_t next_row = -1;
};
using RefineQ8Fn = void (*)(const RefineQ8Args&);
// A screened head's candidates (exec_linear.cpp): given n rows' estimates and bounds (row0 a
// multiple of 4), raises *lower to the largest est - hw if larger, then writes {g0, upper} for
// every 4-row group (the last may be short) whose largest upper bound est + hw reaches *lower, g0
// its first row and upper that bound, in row order, and returns how many. NaNs never raise *lower
// and never count.
struct ScreenCandidate {
  int32_t row;
  float upper;
};
using ScreenSelectFn = int64_t (*)(const float* est, const float* hw, int64_t n, int32_t row0,
                                   float* lower, ScreenCandidate* out);
// One row of a BF16 LM head's screen (screen_row.h): k floats w to Q8 g32 codes q in element
// order, k / 32 F16 scales and kScreenBounds bounds. The baseline ISA's fills every table.
using ScreenRowFn = void (*)(const float* w, int64_t k, int8_t* q, uint16_t* scales, float* bounds);
void screen_row_bf16_baseline(const float* w, int64_t k, int8_t* q, uint16_t* scales,
                              float* bounds);
// The portable reference the SIMD screen is checked against (too slow to pay for itself).
void screen_q8_scalar(const ScreenQ8Args& a);
// A QuantMatmulFn for a Q8 head kept as its screen and low bits (head_screen.h): w is the high
// bits, w_il the low bits, scales row-major; rows r0, r1 multiples of 4, k of 128. The portable
// reference the SIMD one is checked against.
void matmul_q8_split_scalar(const QuantMatmulArgs& a);
// The coded BF16 matmul's contract (KernelTable::matmul_bf16_coded); scratch: 8 k floats.
void matmul_bf16_coded_scalar(const MatmulArgs& a);

constexpr int kNumTypes = 4;  // F32, F16, BF16 (weight and KV cache types), I8 (KV cache only)
constexpr int type_slot(DType t) {
  return t == DType::F32 ? 0 : t == DType::F16 ? 1 : t == DType::BF16 ? 2 : 3;
}

struct KernelTable {
  Isa isa = Isa::Scalar;
  MatmulFn matmul[kNumTypes] = {};        // by weight type
  AttentionFn attention[kNumTypes] = {};  // by KV cache type
  SiluMulFn silu_mul = nullptr;
  RmsNormFn rms_norm = nullptr;
  WidenFn widen[kNumTypes] = {};  // by weight type
  ToBf16Fn to_bf16 = nullptr;
  ToF16Fn to_f16 = nullptr;
  QuantizeKvRowFn quantize_kv_row = nullptr;
  ReadSumFn read_sum = nullptr;
  FmaLoopFn fma_loop = nullptr;
  // The same for int8 dot products (ops: 2 per multiply-add), where an int8 GEMM uses them
  // (quant_prefill); null elsewhere.
  FmaLoopFn dot_i8_loop = nullptr;
  // The same for bf16 pair dot products (flops: 4 per pair), where the bf16 GEMM can run; null
  // elsewhere.
  FmaLoopFn dot_bf16_loop = nullptr;
  // The same for bf16 tile products (AMX tdpbf16ps), which oneDNN's bf16 GEMM runs on where the
  // CPU has them (peak_amx.cpp); null elsewhere. Returns 0 flops if the OS refuses tile state.
  FmaLoopFn dot_bf16_tile_loop = nullptr;
  QuantMatmulFn matmul_q8 = nullptr, matmul_q4 = nullptr;
  // matmul_q4 and matmul_q4cb read their copy (MatmulArgs::w_il) as 16-row panels (q4_panel.h).
  bool q4_panel = false;
  // matmul_q8 reads its copy as 16-row panels (q8_panel.h).
  bool q8_panel = false;
  QuantDequantFn dequant_q8 = nullptr, dequant_q4 = nullptr;
  // Q4 whose nibbles index a codebook (Tensor::codebook) rather than the uniform grid.
  QuantMatmulFn matmul_q4cb = nullptr;
  QuantDequantFn dequant_q4cb = nullptr;
  // The Q8/Q4 matmuls carry a prefill GEMM faster than dequantizing for the GEMM library (int8
  // activations on vpdpbusd: 4x the multiply-adds of an f32 FMA), so long steps with quantized
  // weights stay on them unless a library was asked for by name.
  bool quant_prefill = false;
  QuantActFn quant_act = nullptr;  // with quant_prefill
  // Null where no SIMD kernel reads the screen (the scalar reference is too slow to pay for
  // itself).
  ScreenQ8Fn screen_q8 = nullptr;
  ScreenSelectFn screen_select = nullptr;
  ScreenRowFn screen_row_bf16 = screen_row_bf16_baseline;
  // A Q8 head from its screen and low bits (matmul_q8_split_scalar's contract), where a SIMD
  // kernel reads them at the speed of its codes; null elsewhere (the head keeps a copy of them).
  QuantMatmulFn matmul_q8_split = nullptr;
  RefineQ8Fn refine_q8_split = nullptr;  // with matmul_q8_split and screen_q8
  // n rows of k BF16 columns into their kPackBf16 copy, and rows [r0, r0 + n) of it back to
  // row-major: pack_rows and unpack_rows, by transposes where an ISA has them (AVX-512, AVX2).
  using PackBf16Fn = void (*)(const void* rows, int64_t n, int64_t k, void* out);
  using UnpackBf16Fn = void (*)(const void* packed, int64_t r0, int64_t n, int64_t k,
                                uint16_t* out);
  PackBf16Fn pack_bf16 = nullptr;
  UnpackBf16Fn unpack_bf16 = nullptr;
  // BF16 matrices kept coded in 12 bits a weight (bf16_coded.h), where a kernel reads them at the
  // speed of their bytes: rows [r0, r1) (whole groups) of the coded groups at MatmulArgs::w_il,
  // exceptions left to the caller (add_coded_exceptions), bit for bit matmul_bf16_coded_scalar;
  // null in the scalar table (BF16 matrices read as rows). decode_bf16_coded: a group back to
  // kPackBf16.
  MatmulFn matmul_bf16_coded = nullptr;
  DecodeCodedFn decode_bf16_coded = decode_bf16_coded_scalar;
  // The bf16 prefill GEMM on that copy as it is: n_tokens rows of bf16 activations x [T][k] (row
  // stride ldx) against rows [r0, r1) (whole groups) of the packed copy, f32 results at
  // y[t * ldy + r - r0]; null where none (the library GEMM then gets the rows unpacked).
  using GemmBf16Fn = void (*)(const void* packed, int64_t k, int64_t r0, int64_t r1,
                              const uint16_t* x, int64_t ldx, int n_tokens, float* y, int64_t ldy);
  GemmBf16Fn gemm_bf16_packed = nullptr;
  // Long steps with BF16 weights stay on the matmul kernels (f32 FMAs on the packed copy) instead
  // of the f32 GEMM library, on AVX-512 without a fast bf16 dot (an Intel Xeon without AMX, whose
  // vdpbf16ps runs at half its FMA rate): oneDNN's sgemm on rows unpacked to f32 prefilled a 0.6B
  // no faster at 512 tokens and a third slower at 64 (bench/RESULTS.md, "Prefetches that run").
  bool bf16_prefill_on_kernels = false;
};

// Whether w's packed copy, where it has one, is a Q4 panel (q4_panel.h) for this table.
inline bool reads_q4_panel(const KernelTable& kt, const Tensor& w) {
  return kt.q4_panel && w.dtype == DType::Q4;
}
// The same for a Q8 panel (q8_panel.h).
inline bool reads_q8_panel(const KernelTable& kt, const Tensor& w) {
  return kt.q8_panel && w.dtype == DType::Q8 && !w.codebook;
}
// Whether w's packed copy is Q4 or Q8 panels.
inline bool reads_panel(const KernelTable& kt, const Tensor& w) {
  return reads_q4_panel(kt, w) || reads_q8_panel(kt, w);
}

// One fill function per kernel file; make_kernel_table calls those of each level up to the ISA.
void fill_matmul_scalar(KernelTable& k);
void fill_attention_scalar(KernelTable& k);
void fill_vecops_scalar(KernelTable& k);
void fill_matmul_q8_scalar(KernelTable& k);
void fill_matmul_q4_scalar(KernelTable& k);
void fill_matmul_q4cb_scalar(KernelTable& k);
#if defined(__x86_64__)
void fill_matmul_f32_avx2(KernelTable& k);
void fill_matmul_f16_avx2(KernelTable& k);
void fill_matmul_bf16_avx2(KernelTable& k);
void fill_attention_avx2(KernelTable& k);
void fill_vecops_avx2(KernelTable& k);
void fill_matmul_q8_avx2(KernelTable& k);
void fill_matmul_q4_avx2(KernelTable& k);
void fill_matmul_q4cb_avx2(KernelTable& k);
void fill_screen_q8_avx2(KernelTable& k);
void fill_matmul_bf16_coded_avx2(KernelTable& k);
void fill_matmul_q8_avxvnni(KernelTable& k);  // AVX2 with f.avxvnni
void fill_matmul_q4_avxvnni(KernelTable& k);
void fill_matmul_q4cb_avxvnni(KernelTable& k);
void fill_screen_q8_avxvnni(KernelTable& k);
void fill_matmul_f32_avx512(KernelTable& k);
void fill_matmul_f16_avx512(KernelTable& k);
void fill_matmul_bf16_avx512(KernelTable& k);
void fill_gemm_bf16_avx512(KernelTable& k);
void fill_attention_avx512(KernelTable& k);
void fill_vecops_avx512(KernelTable& k);
void fill_matmul_q8_avx512(KernelTable& k);
void fill_matmul_q4_avx512(KernelTable& k);
void fill_matmul_q4cb_avx512(KernelTable& k);
void fill_screen_q8_avx512(KernelTable& k);
void fill_matmul_q8_split_avx512(KernelTable& k);
void fill_matmul_bf16_coded_avx512(KernelTable& k);
#endif
void fill_peak_amx(KernelTable& k);  // with f.amx_bf16: sets dot_bf16_tile_loop if tiles work
#if defined(__aarch64__)
void fill_matmul_neon(KernelTable& k);
void fill_matmul_bf16_coded_neon(KernelTable& k);
void fill_attention_neon(KernelTable& k);
void fill_vecops_neon(KernelTable& k);
// Q8/Q4/Q4-codebook on SDOT when f has neon_dotprod, else on plain NEON.
void fill_matmul_q8_neon(KernelTable& k, const CpuFeatures& f);
void fill_matmul_q4_neon(KernelTable& k, const CpuFeatures& f);
void fill_matmul_q4cb_neon(KernelTable& k, const CpuFeatures& f);
void fill_screen_q8_neon(KernelTable& k, const CpuFeatures& f);
#endif

// The table for an ISA: scalar first, then each level up to `isa` overrides its slots. Extensions
// within a level (NEON's dotprod) are used as `f` reports them, so tests can turn one off to reach
// its fallback; the one-argument form detects them.
KernelTable make_kernel_table(Isa isa, const CpuFeatures& f);
KernelTable make_kernel_table(Isa isa);

}  // namespace hearth::cpu
