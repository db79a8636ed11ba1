// AVX-512 matmul for BF16 weights: W row-major [rows, k] in BF16, or its kPackBf16 copy (16 rows'
// column pairs per 64-byte line), x and y f32; see matmul_avx512.h.
#include "backends/cpu/matmul_avx512.h"

namespace hearth::cpu {

namespace {

// Each 16 lines of a packed group (16 rows x 32 columns) are one transpose of dwords (column
// pairs) of the rows' 64 bytes there, both ways: the prefill GEMM reads row-major weights, and
// the copy is made at load.
template <bool kPack>
void transpose_group_tiles(const uint16_t* src, uint16_t* dst, int64_t k) {
  for (int64_t c = 0; c < k; c += 32) {
    __m512i a[16];
    for (int i = 0; i < 16; ++i)
      a[i] = _mm512_loadu_si512(kPack ? src + i * k + c : src + 16 * c + 32 * i);
    transpose16x16(a);
    for (int j = 0; j < 16; ++j)
      _mm512_storeu_si512(kPack ? dst + 16 * c + 32 * j : dst + j * k + c, a[j]);
  }
}

void unpack_bf16_avx512(const void* packed, int64_t r0, int64_t n, int64_t k, uint16_t* out) {
  if (r0 % 16 || n % 16 || k % 32) return unpack_rows(packed, r0, n, 2 * k, kPackBf16, out);
  const auto* src = static_cast<const uint16_t*>(packed);
  for (int64_t g = r0; g < r0 + n; g += 16)
    transpose_group_tiles<false>(src + g * k, out + (g - r0) * k, k);
}

void pack_bf16_avx512(const void* rows, int64_t n, int64_t k, void* out) {
  if (n % 16 || k % 32) return pack_rows(rows, n, 2 * k, kPackBf16, out);
  for (int64_t g = 0; g < n; g += 16)
    transpose_group_tiles<true>(static_cast<const uint16_t*>(rows) + g * k,
                                static_cast<uint16_t*>(out) + g * k, k);
}

}  // namespace

void fill_matmul_bf16_avx512(KernelTable& k) {
  k.matmul[type_slot(DType::BF16)] = matmul_avx512<DType::BF16>;
  k.unpack_bf16 = unpack_bf16_avx512;
  k.pack_bf16 = pack_bf16_avx512;
}

}  // namespace hearth::cpu
