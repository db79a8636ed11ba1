// Reference Q4-codebook matmul: codes and scales as Q4 (quant/FORMAT.md) but each nibble i stands
// for codebook[i] times its group's scale; x and y f32. Each weight row is dequantized once into
// scratch (exactly as the embedding lookup does) and reused for every token: the "dequantize then
// multiply" the SIMD kernels are checked against.
#include "backends/cpu/kernels.h"
#include "backends/cpu/matmul_quant.h"

namespace hearth::cpu {

namespace {

void matmul_q4cb_scalar(const QuantMatmulArgs& a) {
  qk::matmul_dequant_scalar(a, DType::Q4);
}

}  // namespace

void fill_matmul_q4cb_scalar(KernelTable& k) {
  k.matmul_q4cb = matmul_q4cb_scalar;
  k.dequant_q4cb = qk::dequant_rows_scalar;
}

}  // namespace hearth::cpu
