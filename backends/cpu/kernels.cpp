#include "backends/cpu/kernels.h"

namespace hearth::cpu {

KernelTable make_kernel_table(Isa isa) {
  return make_kernel_table(isa, detect_cpu_features());
}

KernelTable make_kernel_table(Isa isa, const CpuFeatures& f) {
  KernelTable k;
  fill_matmul_scalar(k);
  fill_attention_scalar(k);
  fill_vecops_scalar(k);
  fill_matmul_q8_scalar(k);
  fill_matmul_q4_scalar(k);
  fill_matmul_q4cb_scalar(k);
#if defined(__x86_64__)
  if (isa >= Isa::Avx2) {
    fill_matmul_f32_avx2(k);
    fill_matmul_f16_avx2(k);
    fill_matmul_bf16_avx2(k);
    fill_attention_avx2(k);
    fill_vecops_avx2(k);
    fill_matmul_q8_avx2(k);
    fill_matmul_q4_avx2(k);
    fill_matmul_q4cb_avx2(k);
  }
  if (isa >= Isa::Avx512) {
    fill_matmul_f32_avx512(k);
    fill_matmul_f16_avx512(k);
    fill_matmul_bf16_avx512(k);
    fill_attention_avx512(k);
    fill_vecops_avx512(k);
    fill_matmul_q8_avx512(k);
    fill_matmul_q4_avx512(k);
    fill_matmul_q4cb_avx512(k);
  }
#endif
#if defined(__aarch64__)
  if (isa == Isa::Neon) {
    fill_matmul_neon(k);
    fill_matmul_q8_neon(k, f);
    fill_matmul_q4_neon(k, f);
    fill_matmul_q4cb_neon(k, f);
  }
#endif
  k.isa = isa;
  return k;
}

}  // namespace hearth::cpu
