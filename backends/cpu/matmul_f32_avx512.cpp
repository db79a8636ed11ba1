// AVX-512 matmul for F32 weights: W row-major [rows, k] in F32, x and y f32; see matmul_avx512.h.
#include "backends/cpu/matmul_avx512.h"

namespace hearth::cpu {

void fill_matmul_f32_avx512(KernelTable& k) {
  k.matmul[type_slot(DType::F32)] = matmul_avx512<DType::F32>;
}

}  // namespace hearth::cpu
