// Reference Q8 matmul: codes and scales as in quant/FORMAT.md, x and y f32. Each weight row is
// dequantized once into scratch (exactly as the embedding lookup does) and reused for every token,
// so this is the "dequantize then multiply" the SIMD kernels are checked against.
#include "backends/cpu/kernels.h"
#include "backends/cpu/matmul_quant.h"

namespace hearth::cpu {

namespace {

void matmul_q8_scalar(const QuantMatmulArgs& a) {
  qk::matmul_dequant_scalar(a, DType::Q8);
}

}  // namespace

void fill_matmul_q8_scalar(KernelTable& k) {
  k.matmul_q8 = matmul_q8_scalar;
  k.dequant_q8 = qk::dequant_rows_scalar;
}

}  // namespace hearth::cpu
