// Linear steps: an optional RmsNorm of the input, MatMuls sharing it, and their epilogue. Short
// steps (decode), and long ones whose quantized weights the kernels multiply faster than a library
// (KernelTable::quant_prefill), run the ISA's matmul kernel with every thread on its own rows of
// all the parts; other long steps (prefill) call the GEMM library on each thread's block of each
// part.
#include <algorithm>
#include <cmath>

#include "backends/cpu/compiled.h"
#include "backends/cpu/ops.h"
#include "backends/cpu/q8_panel.h"
#include "backends/cpu/row_claims.h"
#include "core/error.h"

namespace hearth::cpu {

namespace {

// A BF16 matrix kept coded (bf16_coded.h): whole groups by the coded kernel, then their
// exceptions; rows outside them (a thread's range need not start on one) from the model's rows.
void matmul_bf16_coded(const StepCtx& c, const Tensor& w, WeightCopy copy, const float* x,
                       int64_t T, int64_t r0, int64_t r1, float* y, int64_t ldy) {
  const int64_t k = w.cols();
  const auto [g0, g1] = whole_groups(r0, r1, kCodedRows);
  const MatmulFn rows = c.kt.matmul[type_slot(DType::BF16)];
  MatmulArgs a{w.data, k, x, k, int(T), y, ldy, r0, g0, c.scratch() + c.cg.off_mm};
  if (r0 < g0) rows(a);
  if (g0 < g1) {
    a.r0 = g0, a.r1 = g1, a.y = y + (g0 - r0), a.w_il = copy.il;
    c.kt.matmul_bf16_coded(a);
    add_coded_exceptions(coded_bf16_view(copy.il, copy.exc, w.rows()), g0, g1, x, k, int(T), a.y,
                         ldy);
  }
  if (g1 < r1) {
    a.r0 = g1, a.r1 = r1, a.y = y + (g1 - r0), a.w_il = nullptr;
    rows(a);
  }
}

}  // namespace

void matmul_rows(const StepCtx& c, const Tensor& w, WeightCopy copy, const float* x, int64_t T,
                 int64_t r0, int64_t r1, float* y, int64_t ldy, int64_t prefetch_r1, bool reuse_x,
                 const ActsI8* xi8) {
  if (copy.exc) return matmul_bf16_coded(c, w, copy, x, T, r0, r1, y, ldy);
  const void* w_il = copy.il;
  MatmulArgs a{w.data, w.cols(), x, w.cols(), int(T), y, ldy, r0, r1, c.scratch() + c.cg.off_mm};
  a.prefetch_r1 = prefetch_r1;
  a.w_il = w_il;
  const bool split = reads_split(c.cg, w, w_il);
  if (split) a.w = c.cg.screen.hi, a.w_il = c.cg.screen.lo;
  if (w.quantized()) {  // Q8/Q4 kernels handle decode and prefill themselves
    QuantMatmulArgs q;
    static_cast<MatmulArgs&>(q) = a;
    q.scales = w.scales;
    q.scale_dtype = w.scale_dtype;
    q.group = w.group_size;
    q.codebook = w.codebook;
    q.reuse_x = reuse_x;
    if (xi8) q.xq = xi8->q, q.xd = xi8->d, q.xsum = xi8->sum;
    if (split) return c.kt.matmul_q8_split(q);
    (w.dtype == DType::Q8 ? c.kt.matmul_q8 : w.codebook ? c.kt.matmul_q4cb : c.kt.matmul_q4)(q);
    return;
  }
  c.kt.matmul[type_slot(w.dtype)](a);
}

namespace {

using Epi = LinearStep::Epilogue;

const Tensor& weight(const StepCtx& c, const LinearStep::Part& p) {
  return c.cg.weight[size_t(p.w)];
}
// Its copy (MatmulArgs::w_il) and a coded copy's exceptions, or nulls.
WeightCopy copy_of(const StepCtx& c, const LinearStep::Part& p) {
  return {c.cg.w_il[size_t(p.w)], c.cg.w_exc[size_t(p.w)]};
}

// The graph's logits rows, reduced to the running best per output row instead of being stored.
void argmax_update(const StepCtx& c, const float* y, int64_t ldy, int64_t T, int64_t r0,
                   int64_t n) {
  float* best = c.cg.best_val.data() + size_t(c.tid) * size_t(c.cg.max_outputs);
  int32_t* idx = c.cg.best_idx.data() + size_t(c.tid) * size_t(c.cg.max_outputs);
  for (int64_t t = 0; t < T; ++t) {
    const float* row = y + t * ldy;
    for (int64_t i = 0; i < n; ++i)
      if (row[i] > best[t]) best[t] = row[i], idx[t] = int32_t(r0 + i);  // NaN never wins
  }
}

void add_residual(const float* res, float* out, int64_t ld, int64_t T, int64_t r0, int64_t r1) {
  for (int64_t t = 0; t < T; ++t)
    for (int64_t r = r0; r < r1; ++r) out[t * ld + r] += res[t * ld + r];
}

void silu_mul_block(const StepCtx& c, const float* a, const float* b, int64_t ld_ab, float* out,
                    int64_t ld_out, int64_t T, int64_t n) {
  for (int64_t t = 0; t < T; ++t) c.kt.silu_mul(a + t * ld_ab, b + t * ld_ab, out + t * ld_out, n);
}

// --- short steps: the ISA's matmul kernel ------------------------------------------------------

// This thread's chunks [b, e) of a step's n rows of K weights, each passed to f: claimed as it
// gets to them (RowClaims) for a few tokens; for many, its even share in one call, since each
// call of the int8 GEMM lays out the step's activations afresh (claimed in chunks of at least 512
// rows, a 0.6B INT4 prefill of 512 tokens ran 1-4% slower on two threads in two rounds of three).
template <class F>
void for_step_rows(const StepCtx& c, std::atomic<int64_t>& claim, int64_t n, int64_t K, int64_t T,
                   F f) {
  int64_t b, e;
  if (T >= kQuantGemmMinTokens) {
    ThreadPool::split(n, c.tid, c.nth, 16, &b, &e);
    if (b < e) f(b, e);
    return;
  }
  for (RowClaims rows(claim, n, 16, RowClaims::min_rows(K, 16), c.nth); rows.next(&b, &e);) f(b, e);
}

// The weight and copy of a thread's previous matmul call on a step's input.
struct PrevCall {
  const Tensor* w = nullptr;
  const void* il = nullptr;
};

// Rows [b, e) of the parts' rows as one range, stored or (argmax) reduced to the best per token.
// prev: this thread's previous call on x in this step, if any (its quantized x may be reused).
void store_rows(const StepCtx& c, const LinearStep& s, const float* x, int64_t T, const ActsI8* xi8,
                int64_t b, int64_t e, bool argmax, PrevCall& prev) {
  float* tmp_a = c.scratch() + c.cg.off_tmp;
  int64_t base = 0;
  for (const auto& p : s.parts) {
    const Tensor& w = weight(c, p);
    const int64_t lo = std::max(b, base) - base, hi = std::min(e, base + w.rows()) - base;
    base += w.rows();
    if (lo >= hi) continue;
    const bool reuse = prev.w && same_quant_kernel(*prev.w, prev.il, w, copy_of(c, p).il);
    prev = {&w, copy_of(c, p).il};
    if (argmax) {
      const int64_t br = epilogue_rows(T);
      for (int64_t r = lo; r < hi; r += br) {
        const int64_t r1 = std::min(hi, r + br);
        matmul_rows(c, w, copy_of(c, p), x, T, r, r1, tmp_a, br, hi, reuse || r > lo, xi8);
        argmax_update(c, tmp_a, br, T, r, r1 - r);
      }
      continue;
    }
    const int out_id = s.epi == Epi::AddResidual ? s.out : p.out;
    float* out = c.ptr(out_id);
    const int64_t ld = c.tensor(out_id).cols;
    matmul_rows(c, w, copy_of(c, p), x, T, lo, hi, out + lo, ld, 0, reuse, xi8);
    if (s.epi == Epi::AddResidual) add_residual(c.ptr(s.residual), out, ld, T, lo, hi);
  }
}

void linear_native(const StepCtx& c, const LinearStep& s, const float* x, int64_t T,
                   const ActsI8* xi8, std::atomic<int64_t>& claim) {
  float* tmp_a = c.scratch() + c.cg.off_tmp;
  float* tmp_b = tmp_a + c.cg.tmp_floats;
  if (s.epi == Epi::SiluMul) {
    // Row r of the output needs row r of both matrices: gate and up are walked side by side.
    const Tensor& wa = weight(c, s.parts[0]);
    const Tensor& wb = weight(c, s.parts[1]);
    const int64_t N = wa.rows();
    float* out = c.ptr(s.out);
    const bool same =
        same_quant_kernel(wa, copy_of(c, s.parts[0]).il, wb, copy_of(c, s.parts[1]).il);
    const int64_t br = epilogue_rows(T);
    bool quantized = false;  // this thread's scratch holds x as the kernel quantized it
    for_step_rows(c, claim, N, wa.cols(), T, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; r += br) {
        const int64_t r1 = std::min(e, r + br);
        matmul_rows(c, wa, copy_of(c, s.parts[0]), x, T, r, r1, tmp_a, br, e, same && quantized,
                    xi8);
        matmul_rows(c, wb, copy_of(c, s.parts[1]), x, T, r, r1, tmp_b, br, e, same, xi8);
        silu_mul_block(c, tmp_a, tmp_b, br, out + r, N, T, r1 - r);
        quantized = true;
      }
    });
    return;
  }
  if (s.logits && T == 1 && s.parts[0].w == c.cg.screen_w && c.cg.screen_on) {  // one part
    if (c.in.argmax) return argmax_screened(c, s, x);
    const int k = c.in.top_k ? c.in.top_k[0] : 0;
    if (k > 0 && k < weight(c, s.parts[0]).rows())
      return topk_screened(c, s, x, k, c.ptr(s.parts[0].out));
  }
  // Store and AddResidual: the parts' rows as one range, claimed in chunks by the threads; argmax
  // splits them evenly (merge_argmax wants the threads' ranges ascending in thread order).
  int64_t total = 0;
  for (const auto& p : s.parts) total += weight(c, p).rows();
  PrevCall prev;
  if (s.logits && c.in.argmax) {
    int64_t b, e;
    ThreadPool::split(total, c.tid, c.nth, 16, &b, &e);
    return store_rows(c, s, x, T, xi8, b, e, true, prev);
  }
  for_step_rows(c, claim, total, weight(c, s.parts[0]).cols(), T,
                [&](int64_t b, int64_t e) { store_rows(c, s, x, T, xi8, b, e, false, prev); });
}

// --- long steps: the GEMM library ---------------------------------------------------------------

// A coded BF16 matrix (bf16_coded.h) for a long step: blocks of whole groups rebuilt as the packed
// copy holds them, for the packed bf16 GEMM (two groups, which stay in L2 while the tokens pass),
// or unpacked further to rows for the library.
void gemm_rows_coded(const StepCtx& c, const Tensor& w, WeightCopy copy, const float* x,
                     const uint16_t* xb, int64_t T, int64_t r0, int64_t r1, float* y, int64_t ldy) {
  const int64_t K = w.cols();
  if (r0 % kCodedRows || r1 % kCodedRows)
    fail("internal: a coded BF16 matrix's rows ", r0, "..", r1, " are not groups");
  const CodedBf16 view = coded_bf16_view(copy.il, copy.exc, w.rows());
  auto* rows = reinterpret_cast<uint16_t*>(c.scratch() + c.cg.off_unpack);
  if (xb && c.kt.gemm_bf16_packed) {
    for (int64_t r = r0; r < r1; r += 2 * kCodedRows) {
      const int64_t n = std::min(r1, r + 2 * kCodedRows) - r;
      decode_bf16_rows(c.kt.decode_bf16_coded, view, K, r, n, rows);
      c.kt.gemm_bf16_packed(rows, K, 0, n, xb, K, int(T), y + (r - r0), ldy);
    }
    return;
  }
  // The wide block holds kGemmBlockRows f32 rows: room for as many rebuilt packed ones first.
  float* wide = c.scratch() + c.cg.off_wide;
  for (int64_t r = r0; r < r1; r += kGemmBlockRows) {
    const int64_t n = std::min(r1, r + kGemmBlockRows) - r;
    decode_bf16_rows(c.kt.decode_bf16_coded, view, K, r, n, reinterpret_cast<uint16_t*>(wide));
    c.kt.unpack_bf16(wide, 0, n, K, rows);
    if (xb) {
      c.gemm->bf16(c.tid, int(T), n, K, xb, K, rows, y + (r - r0), ldy);
    } else {
      c.kt.widen[type_slot(DType::BF16)](rows, wide, n * K);
      c.gemm->f32(c.tid, int(T), n, K, x, K, wide, y + (r - r0), ldy);
    }
  }
}

// y[t][r - r0] = x[t] . W[r] for rows [r0, r1) of w, through the GEMM: bf16 inputs as they are,
// f32 weights in place, 16-bit weights widened block by block into this thread's scratch.
void gemm_rows(const StepCtx& c, const Tensor& w, WeightCopy copy, const float* x,
               const uint16_t* xb, int64_t T, int64_t r0, int64_t r1, float* y, int64_t ldy) {
  const int64_t K = w.cols();
  if (r0 >= r1) return;
  if (copy.exc) return gemm_rows_coded(c, w, copy, x, xb, T, r0, r1, y, ldy);
  const void* w_il = copy.il;
  // (A head read from its screen and low bits gets one row of logits a step: never here.)
  if (reads_split(c.cg, w, w_il)) return matmul_rows(c, w, copy, x, T, r0, r1, y, ldy);
  if (w_il && w.dtype == DType::BF16 && xb && c.kt.gemm_bf16_packed)
    return c.kt.gemm_bf16_packed(w_il, K, r0, r1, xb, K, int(T), y, ldy);
  if (w_il && w.dtype == DType::BF16) {
    // The backend's packed copy, unpacked block by block for the library, so the model's mapping
    // of the same weight is never read (and never made resident) once the copy exists.
    auto* rows = reinterpret_cast<uint16_t*>(c.scratch() + c.cg.off_unpack);
    float* wide = c.scratch() + c.cg.off_wide;
    const int64_t block = xb ? kUnpackRows : kGemmBlockRows;  // wide holds kGemmBlockRows
    for (int64_t r = r0; r < r1; r += block) {
      const int64_t n = std::min(r1, r + block) - r;
      c.kt.unpack_bf16(w_il, r, n, K, rows);
      if (xb) {
        c.gemm->bf16(c.tid, int(T), n, K, xb, K, rows, y + (r - r0), ldy);
      } else {
        c.kt.widen[type_slot(DType::BF16)](rows, wide, n * K);
        c.gemm->f32(c.tid, int(T), n, K, x, K, wide, y + (r - r0), ldy);
      }
    }
    return;
  }
  if (w.quantized()) {  // Q8/Q4: blocks of rows dequantized for the library, like 16-bit widening
    const QuantDequantFn deq = w.dtype == DType::Q8 ? c.kt.dequant_q8
                               : w.codebook         ? c.kt.dequant_q4cb
                                                    : c.kt.dequant_q4;
    float* wide = c.scratch() + c.cg.off_wide;
    const int64_t row_bytes = int64_t(w.nbytes) / w.rows();
    for (int64_t r = r0; r < r1; r += kGemmBlockRows) {
      const int64_t n = std::min(r1, r + kGemmBlockRows) - r;
      if (w_il) {
        // The panels' rows (codes and scales) back to row-major first, as for BF16 above (a
        // block of codes takes at most half of what the unpacked BF16 rows may).
        auto* codes = reinterpret_cast<uint8_t*>(c.scratch() + c.cg.off_unpack);
        auto* scales = reinterpret_cast<uint16_t*>(codes + n * row_bytes);
        unpack_panel(w.dtype, static_cast<const uint8_t*>(w_il), K, w.group_size, r, n, codes,
                     scales);
        Tensor block = w;
        block.shape[0] = n;
        block.data = codes;
        block.nbytes = size_t(n * row_bytes);
        block.scales = scales;
        deq(block, 0, n, wide, xb != nullptr);
      } else {
        deq(w, r, n, wide, xb != nullptr);
      }
      if (xb)
        c.gemm->bf16(c.tid, int(T), n, K, xb, K, reinterpret_cast<const uint16_t*>(wide),
                     y + (r - r0), ldy);
      else
        c.gemm->f32(c.tid, int(T), n, K, x, K, wide, y + (r - r0), ldy);
    }
    return;
  }
  if (xb) {
    const uint16_t* wp = static_cast<const uint16_t*>(w.data) + r0 * K;
    c.gemm->bf16(c.tid, int(T), r1 - r0, K, xb, K, wp, y, ldy);
  } else if (w.dtype == DType::F32) {
    c.gemm->f32(c.tid, int(T), r1 - r0, K, x, K, static_cast<const float*>(w.data) + r0 * K, y,
                ldy);
  } else {
    float* wide = c.scratch() + c.cg.off_wide;
    const size_t esz = dtype_size(w.dtype);
    for (int64_t r = r0; r < r1; r += kGemmBlockRows) {
      const int64_t n = std::min(r1, r + kGemmBlockRows) - r;
      c.kt.widen[type_slot(w.dtype)](static_cast<const uint8_t*>(w.data) + size_t(r * K) * esz,
                                     wide, n * K);
      c.gemm->f32(c.tid, int(T), n, K, x, K, wide, y + (r - r0), ldy);
    }
  }
}

void linear_gemm(const StepCtx& c, const LinearStep& s, const float* x, const uint16_t* xb,
                 int64_t T) {
  float* tmp_a = c.scratch() + c.cg.off_tmp;
  float* tmp_b = tmp_a + c.cg.tmp_floats;
  int64_t b, e;
  if (s.epi == Epi::SiluMul) {
    const Tensor& wa = weight(c, s.parts[0]);
    const Tensor& wb = weight(c, s.parts[1]);
    const int64_t N = wa.rows();
    float* out = c.ptr(s.out);
    ThreadPool::split(N, c.tid, c.nth, 16, &b, &e);
    for (int64_t r = b; r < e; r += kGemmEpilogueRows) {
      const int64_t r1 = std::min(e, r + kGemmEpilogueRows);
      gemm_rows(c, wa, copy_of(c, s.parts[0]), x, xb, T, r, r1, tmp_a, kGemmEpilogueRows);
      gemm_rows(c, wb, copy_of(c, s.parts[1]), x, xb, T, r, r1, tmp_b, kGemmEpilogueRows);
      silu_mul_block(c, tmp_a, tmp_b, kGemmEpilogueRows, out + r, N, T, r1 - r);
    }
    return;
  }
  // Each thread takes its share of every part, so each library call is as large as possible.
  for (const auto& p : s.parts) {
    const Tensor& w = weight(c, p);
    ThreadPool::split(w.rows(), c.tid, c.nth, 16, &b, &e);
    if (s.logits && c.in.argmax) {
      for (int64_t r = b; r < e; r += kGemmEpilogueRows) {
        const int64_t r1 = std::min(e, r + kGemmEpilogueRows);
        gemm_rows(c, w, copy_of(c, p), x, xb, T, r, r1, tmp_a, kGemmEpilogueRows);
        argmax_update(c, tmp_a, kGemmEpilogueRows, T, r, r1 - r);
      }
      continue;
    }
    const int out_id = s.epi == Epi::AddResidual ? s.out : p.out;
    float* out = c.ptr(out_id);
    const int64_t ld = c.tensor(out_id).cols;
    gemm_rows(c, w, copy_of(c, p), x, xb, T, b, e, out + b, ld);
    if (s.epi == Epi::AddResidual) add_residual(c.ptr(s.residual), out, ld, T, b, e);
  }
}

bool all_quantized(const StepCtx& c, const LinearStep& s) {
  for (const auto& p : s.parts)
    if (!weight(c, p).quantized()) return false;
  return true;
}

// Q8/Q4 count as bf16 here: gemm_rows dequantizes them straight to bf16 for the bf16 GEMM.
bool all_bf16(const StepCtx& c, const LinearStep& s) {
  for (const auto& p : s.parts)
    if (weight(c, p).dtype != DType::BF16 && !weight(c, p).quantized()) return false;
  return true;
}

}  // namespace

LinearRoute linear_route(const KernelTable& kt, GemmKind kind, bool have_gemm, int gemm_min_tokens,
                         int64_t n_tokens, bool all_quantized, bool all_bf16) {
  const bool quant_gemm = kt.quant_prefill && all_quantized;
  const bool bf16_kernels = kt.bf16_prefill_on_kernels && all_bf16 && !all_quantized;
  if (have_gemm && n_tokens >= gemm_min_tokens && !quant_gemm && !bf16_kernels)
    return kind == GemmKind::DnnlBf16 && all_bf16 ? LinearRoute::LibraryBf16
                                                  : LinearRoute::LibraryF32;
  return quant_gemm && n_tokens >= kQuantGemmMinTokens ? LinearRoute::Int8Gemm
                                                       : LinearRoute::Kernels;
}

void run_linear_step(const StepCtx& c, const LinearStep& s, std::atomic<int64_t>& claim) {
  const int64_t T = c.rows(s.x);
  if (T == 0) return;  // e.g. the LM head of a prefill chunk whose logits nobody asked for
  const int64_t K = c.tensor(s.x).cols;
  const LinearRoute route = linear_route(c.kt, c.gemm_kind, c.gemm != nullptr, c.gemm_min_tokens, T,
                                         all_quantized(c, s), all_bf16(c, s));
  const bool long_step = route == LinearRoute::LibraryF32 || route == LinearRoute::LibraryBf16;
  const bool bf16 = route == LinearRoute::LibraryBf16;
  // Many tokens through the kernels' int8 GEMM: the input is quantized once, shared.
  const bool i8 = route == LinearRoute::Int8Gemm;
  const float* x = c.ptr(s.x);
  uint16_t* xb = bf16 ? c.cg.x_bf16.u16() : nullptr;
  const ActsI8 xi8 = i8 ? ActsI8::in(c.cg.x_i8, T, K) : ActsI8();
  if (s.norm_w >= 0 && T <= kPrivateNormTokens && !bf16) {
    // A few rows: every thread normalises them itself, which costs less than a barrier.
    float* xn = c.scratch() + c.cg.off_xn;
    for (int64_t t = 0; t < T; ++t)
      c.kt.rms_norm(x + t * K, c.cg.norm_w[size_t(s.norm_w)], K, s.eps, xn + t * K);
    x = xn;
  } else if (s.norm_w >= 0 || bf16 || i8) {
    // Many rows: each thread prepares its share of one shared copy.
    int64_t b, e;
    ThreadPool::split(T, c.tid, c.nth, 1, &b, &e);
    if (s.norm_w >= 0) {
      for (int64_t t = b; t < e; ++t)
        c.kt.rms_norm(x + t * K, c.cg.norm_w[size_t(s.norm_w)], K, s.eps, c.cg.normed.f() + t * K);
      x = c.cg.normed.f();
    }
    if (bf16) c.kt.to_bf16(x + b * K, xb + b * K, (e - b) * K);
    for (int64_t t = b; t < e && i8; ++t)
      c.kt.quant_act(x + t * K, K, xi8.q + t * K, xi8.d + t * (K / 32), xi8.sum + t * (K / 32));
    c.barrier.wait();
  }
  if (c.in.observe_matmul && c.tid == 0)  // calibration; x is only read while the step runs
    for (const auto& p : s.parts) (*c.in.observe_matmul)(p.w, x, T, K);
  if (long_step)
    linear_gemm(c, s, x, xb, T);
  else
    linear_native(c, s, x, T, i8 ? &xi8 : nullptr, claim);
}

}  // namespace hearth::cpu
