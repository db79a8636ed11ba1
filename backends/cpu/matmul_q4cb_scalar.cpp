// Reference Q4-codebook matmul: codes and scales as Q4 (quant/FORMAT.md) but each nibble i stands
// for codebook[i] times its group's scale; x and y f32. Each weight row is dequantized once into
// scratch (exactly as the embedding lookup does) and reused for every token: the "dequantize then
// multiply" the SIMD kernels are checked against.
#include "backends/cpu/kernels.h"
#include "backends/cpu/matmul_quant.h"
#include "quant/format.h"

namespace hearth::cpu {

namespace {

void matmul_q4cb_scalar(const QuantMatmulArgs& a) {
  Tensor t;
  t.dtype = DType::Q4;
  t.ndim = 2;
  t.shape = {a.r1, a.k, 0, 0};
  t.data = a.w;
  t.scales = a.scales;
  t.scale_dtype = a.scale_dtype;
  t.group_size = a.group;
  t.codebook = a.codebook;
  for (int64_t r = a.r0; r < a.r1; ++r) {
    quant::dequantize_row(t, r, a.scratch);
    for (int tok = 0; tok < a.n_tokens; ++tok) {
      const float* x = a.x + tok * a.ldx;
      float s = 0.f;
      for (int64_t i = 0; i < a.k; ++i) s += a.scratch[i] * x[i];
      a.y[tok * a.ldy + (r - a.r0)] = s;
    }
  }
}

}  // namespace

void fill_matmul_q4cb_scalar(KernelTable& k) {
  k.matmul_q4cb = matmul_q4cb_scalar;
  k.dequant_q4cb = qk::dequant_rows_scalar;
}

}  // namespace hearth::cpu
