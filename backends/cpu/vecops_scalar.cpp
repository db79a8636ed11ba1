// Reference element-wise kernels on contiguous f32 arrays.
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

}  // namespace

void fill_vecops_scalar(KernelTable& k) {
  k.silu_mul = silu_mul_scalar;
  k.to_bf16 = to_bf16_scalar;
}

}  // namespace hearth::cpu
