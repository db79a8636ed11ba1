// Reference element-wise kernels on contiguous f32 arrays (16-bit input for widen, bf16 output
// for to_bf16) and the machine probes of hearth bench.
#include <algorithm>
#include <cmath>

#include "backends/cpu/kernels.h"
#include "backends/cpu/ops.h"

namespace hearth::cpu {

namespace {

void silu_mul_scalar(const float* a, const float* b, float* out, int64_t n) {
  silu_mul(a, b, out, 0, n);
}

void to_bf16_scalar(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(x[i]);
}

void to_f16_scalar(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_f16(x[i]);
}

void rms_norm_scalar(const float* x, const float* w, int64_t n, float eps, float* out) {
  rms_norm_rows(x, w, n, eps, out, 0, 1);
}

template <DType T>
void widen_scalar(const void* src, float* dst, int64_t n) {
  to_f32(T, src, dst, size_t(n));
}

float read_sum_scalar(const float* x, int64_t n) {
  float s[8] = {};
  for (int64_t i = 0; i < n; i += 8)
    for (int j = 0; j < 8; ++j) s[j] += x[i + j];
  return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

float fma_loop_scalar(int64_t iters, double* flops) {
  float a[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  for (int64_t i = 0; i < iters; ++i)
    for (float& v : a) v = v * 0.999999f + 1e-7f;
  *flops = double(iters) * 8 * 2;
  return a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7];
}

}  // namespace

int64_t screen_select_scalar(const float* est, const float* hw, int64_t n, int32_t row0,
                             float* lower, ScreenCandidate* out) {
  float lo = *lower;
  for (int64_t i = 0; i < n; ++i) lo = std::max(lo, est[i] - hw[i]);  // NaN: keeps lo
  *lower = lo;
  int64_t m = 0;
  for (int64_t g = 0; g < n; g += 4) {
    float up = -INFINITY;
    for (int64_t i = g; i < std::min(n, g + 4); ++i) up = std::max(up, est[i] + hw[i]);
    out[m] = {row0 + int32_t(g), up};  // written always, kept when it passes
    m += up >= lo;
  }
  return m;
}

void fill_vecops_scalar(KernelTable& k) {
  k.screen_select = screen_select_scalar;
  k.silu_mul = silu_mul_scalar;
  k.rms_norm = rms_norm_scalar;
  k.widen[type_slot(DType::F32)] = widen_scalar<DType::F32>;
  k.widen[type_slot(DType::F16)] = widen_scalar<DType::F16>;
  k.widen[type_slot(DType::BF16)] = widen_scalar<DType::BF16>;
  k.to_bf16 = to_bf16_scalar;
  k.to_f16 = to_f16_scalar;
  k.quantize_kv_row = quantize_kv_row;
  k.read_sum = read_sum_scalar;
  k.fma_loop = fma_loop_scalar;
}

}  // namespace hearth::cpu
