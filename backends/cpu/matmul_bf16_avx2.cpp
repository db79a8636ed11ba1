// AVX2 matmul for BF16 weights: W row-major [rows, k] in BF16, or its kPackBf16 copy (16 rows'
// column pairs per 64-byte line), x and y f32; see matmul_avx2.h.
#include "backends/cpu/matmul_avx2.h"
#include "backends/cpu/simd_avx2.h"

namespace hearth::cpu {

namespace {

// A packed group's 16 rows, 8 column pairs at a time: for each half (rows 8h .. 8h + 7) one 8 x 8
// transpose of dwords between the rows' 32 bytes there and the half lines of those pairs, both
// ways: the copy is made at load, and the prefill library GEMM reads rows.
template <bool kPack>
void transpose_group_halves(const uint16_t* src, uint16_t* dst, int64_t k) {
  for (int64_t p0 = 0; p0 < k / 2; p0 += 8)
    for (int h = 0; h < 2; ++h) {
      __m256i a[8];
      for (int i = 0; i < 8; ++i) {
        const uint16_t* at = kPack ? src + (8 * h + i) * k + 2 * p0 : src + 32 * (p0 + i) + 16 * h;
        a[i] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at));
      }
      transpose8x8(a);
      for (int j = 0; j < 8; ++j) {
        uint16_t* at = kPack ? dst + 32 * (p0 + j) + 16 * h : dst + (8 * h + j) * k + 2 * p0;
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(at), a[j]);
      }
    }
}

void unpack_bf16_avx2(const void* packed, int64_t r0, int64_t n, int64_t k, uint16_t* out) {
  if (r0 % 16 || n % 16 || k % 16) return unpack_rows(packed, r0, n, 2 * k, kPackBf16, out);
  const auto* src = static_cast<const uint16_t*>(packed);
  for (int64_t g = r0; g < r0 + n; g += 16)
    transpose_group_halves<false>(src + g * k, out + (g - r0) * k, k);
}

void pack_bf16_avx2(const void* rows, int64_t n, int64_t k, void* out) {
  if (n % 16 || k % 16) return pack_rows(rows, n, 2 * k, kPackBf16, out);
  for (int64_t g = 0; g < n; g += 16)
    transpose_group_halves<true>(static_cast<const uint16_t*>(rows) + g * k,
                                 static_cast<uint16_t*>(out) + g * k, k);
}

}  // namespace

void fill_matmul_bf16_avx2(KernelTable& k) {
  k.matmul[type_slot(DType::BF16)] = matmul_avx2<DType::BF16>;
  k.unpack_bf16 = unpack_bf16_avx2;
  k.pack_bf16 = pack_bf16_avx2;
}

}  // namespace hearth::cpu
