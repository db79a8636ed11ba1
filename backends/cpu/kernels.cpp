#include "backends/cpu/kernels.h"

#include <algorithm>
#include <cstring>

namespace hearth::cpu {

namespace {
int64_t packed_at(int64_t r, int64_t c, int64_t row_bytes, PackShape p) {
  return ((r / p.rows) * (row_bytes / p.chunk) + c) * p.rows * p.chunk + (r % p.rows) * p.chunk;
}
}  // namespace

namespace {

// One group of p.rows rows: chunk c of row j <-> packed chunk (c, j), copied in tiles of 16
// chunks so that both sides stay in L1 (4-byte chunks would otherwise cost a division each).
template <bool kPack>
void transpose_group(uint8_t* packed, uint8_t* rows, int64_t row_bytes, PackShape p) {
  const int64_t n = row_bytes / p.chunk;
  const size_t cb = size_t(p.chunk);
  for (int64_t c0 = 0; c0 < n; c0 += 16)
    for (int64_t j = 0; j < p.rows; ++j)
      for (int64_t c = c0; c < std::min(n, c0 + 16); ++c) {
        uint8_t* a = packed + (c * p.rows + j) * p.chunk;
        uint8_t* b = rows + j * row_bytes + c * p.chunk;
        kPack ? std::memcpy(a, b, cb) : std::memcpy(b, a, cb);
      }
}

}  // namespace

void pack_rows(const void* w, int64_t rows, int64_t row_bytes, PackShape p, void* out) {
  auto* src = const_cast<uint8_t*>(static_cast<const uint8_t*>(w));
  auto* dst = static_cast<uint8_t*>(out);
  for (int64_t r = 0; r + p.rows <= rows; r += p.rows)
    transpose_group<true>(dst + r * row_bytes, src + r * row_bytes, row_bytes, p);
}

void unpack_rows(const void* packed, int64_t r0, int64_t n, int64_t row_bytes, PackShape p,
                 void* out) {
  auto* src = const_cast<uint8_t*>(static_cast<const uint8_t*>(packed));
  auto* dst = static_cast<uint8_t*>(out);
  int64_t r = r0;
  // Rows before the first whole group, the whole groups, then the rows after the last.
  auto one = [&](int64_t row) {
    for (int64_t c = 0; c < row_bytes / p.chunk; ++c)
      std::memcpy(dst + (row - r0) * row_bytes + c * p.chunk, src + packed_at(row, c, row_bytes, p),
                  size_t(p.chunk));
  };
  for (; r < r0 + n && r % p.rows; ++r) one(r);
  for (; r + p.rows <= r0 + n; r += p.rows)
    transpose_group<false>(src + r * row_bytes, dst + (r - r0) * row_bytes, row_bytes, p);
  for (; r < r0 + n; ++r) one(r);
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
    if (f.avxvnni) {
      fill_matmul_q8_avxvnni(k);
      fill_matmul_q4_avxvnni(k);
    }
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
    if (f.avx512vbmi) fill_screen_q8_avx512(k);
    if (f.amx_bf16) fill_peak_amx(k);
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
