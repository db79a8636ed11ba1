// AVX-512 matmul for BF16 weights: W row-major [rows, k] in BF16, x and y f32; see matmul_avx512.h.
#include "backends/cpu/matmul_avx512.h"

namespace hearth::cpu {

void fill_matmul_bf16_avx512(KernelTable& k) {
  k.matmul[type_slot(DType::BF16)] = matmul_avx512<DType::BF16>;
}

}  // namespace hearth::cpu
