#include "backends/cpu/kernels.h"

#include <cstring>

namespace hearth::cpu {

namespace {
int64_t packed_at(int64_t r, int64_t c, int64_t row_bytes, PackShape p) {
  return ((r / p.rows) * (row_bytes / p.chunk) + c) * p.rows * p.chunk + (r % p.rows) * p.chunk;
}
}  // namespace

void pack_rows(const void* w, int64_t rows, int64_t row_bytes, PackShape p, void* out) {
  const auto* src = static_cast<const uint8_t*>(w);
  auto* dst = static_cast<uint8_t*>(out);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < row_bytes / p.chunk; ++c)
      std::memcpy(dst + packed_at(r, c, row_bytes, p), src + r * row_bytes + c * p.chunk,
                  size_t(p.chunk));
}

void unpack_rows(const void* packed, int64_t r0, int64_t n, int64_t row_bytes, PackShape p,
                 void* out) {
  const auto* src = static_cast<const uint8_t*>(packed);
  auto* dst = static_cast<uint8_t*>(out);
  for (int64_t r = r0; r < r0 + n; ++r)
    for (int64_t c = 0; c < row_bytes / p.chunk; ++c)
      std::memcpy(dst + (r - r0) * row_bytes + c * p.chunk, src + packed_at(r, c, row_bytes, p),
                  size_t(p.chunk));
}

namespace {
// The table's BF16 (un)packing where no ISA file has a faster one.
void pack_bf16_rows(const void* rows, int64_t n, int64_t k, void* out) {
  pack_rows(rows, n, 2 * k, kPackBf16, out);
}
void unpack_bf16_rows(const void* packed, int64_t r0, int64_t n, int64_t k, uint16_t* out) {
  unpack_rows(packed, r0, n, 2 * k, kPackBf16, out);
}
}  // namespace

KernelTable make_kernel_table(Isa isa) {
  return make_kernel_table(isa, detect_cpu_features());
}

KernelTable make_kernel_table(Isa isa, const CpuFeatures& f) {
  KernelTable k;
  k.pack_bf16 = pack_bf16_rows;
  k.unpack_bf16 = unpack_bf16_rows;
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
    fill_screen_q8_avx2(k);
    fill_matmul_bf16_coded_avx2(k);
    if (f.avxvnni) {
      fill_matmul_q8_avxvnni(k);
      fill_matmul_q4_avxvnni(k);
      fill_matmul_q4cb_avxvnni(k);
      fill_screen_q8_avxvnni(k);
    }
  }
  if (isa >= Isa::Avx512) {
    fill_matmul_f32_avx512(k);
    fill_matmul_f16_avx512(k);
    fill_matmul_bf16_avx512(k);
    fill_gemm_bf16_avx512(k);
    fill_attention_avx512(k);
    fill_vecops_avx512(k);
    fill_matmul_q8_avx512(k);
    fill_matmul_q4_avx512(k);
    fill_matmul_q4cb_avx512(k);
    fill_screen_q8_avx512(k);
    fill_matmul_q8_split_avx512(k);
    fill_matmul_bf16_coded_avx512(k);
    if (f.amx_bf16) fill_peak_amx(k);
  }
#endif
#if defined(__aarch64__)
  if (isa == Isa::Neon) {
    fill_matmul_neon(k);
    fill_matmul_bf16_coded_neon(k);
    fill_attention_neon(k);
    fill_vecops_neon(k);
    fill_matmul_q8_neon(k, f);
    fill_matmul_q4_neon(k, f);
    fill_matmul_q4cb_neon(k, f);
    fill_screen_q8_neon(k, f);
  }
#endif
  k.isa = isa;
  return k;
}

}  // namespace hearth::cpu
