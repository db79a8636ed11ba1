#include "backends/cpu/kernels.h"

#include <cstring>

namespace hearth::cpu {

void pack_bf16_rows4(const uint16_t* w, int64_t rows, int64_t k, uint16_t* out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < k / 32; ++c)
      std::memcpy(out + ((r / 4) * (k / 32) + c) * 128 + (r % 4) * 32, w + r * k + c * 32, 64);
}

void unpack_bf16_rows4(const uint16_t* packed, int64_t r0, int64_t n, int64_t k, uint16_t* out) {
  for (int64_t r = r0; r < r0 + n; ++r)
    for (int64_t c = 0; c < k / 32; ++c)
      std::memcpy(out + (r - r0) * k + c * 32,
                  packed + ((r / 4) * (k / 32) + c) * 128 + (r % 4) * 32, 64);
}

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
