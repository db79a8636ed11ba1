// AVX-512 matmul for F16 weights: W row-major [rows, k] in F16, x and y f32; see matmul_avx512.h.
#include "backends/cpu/matmul_avx512.h"

namespace hearth::cpu {

void fill_matmul_f16_avx512(KernelTable& k) {
  k.matmul[type_slot(DType::F16)] = matmul_avx512<DType::F16>;
}

}  // namespace hearth::cpu
