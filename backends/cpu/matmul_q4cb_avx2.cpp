// Q4-codebook matmul, AVX2: Q4's 128-element chunks of 64 bytes in slot order (quant/FORMAT.md),
// low nibbles the chunk's first half and high nibbles its second, 4-byte lane i in block i mod 4,
// each nibble an index into the 16 int8 levels. vpshufb turns a nibble plane into levels; maddubs
// multiplies |level| with the int8 activations (same slot order) carrying the level's sign, as the
// Q8 kernel does, so lanes hold exact signed dots; one broadcast of the chunk's 4 block factors
// scales them. Dequantization (GEMM prefill blocks) looks levels up the same way and puts each
// block's dwords back in element order with one dword permute and a 64-bit unpack. The backend's
// copy (w_il) is Q4's 16-row panels (q4_panel.h), read by matmul_panel_avx2.h as signed levels.
#include "backends/cpu/matmul_panel_avx2.h"

namespace hearth::cpu {

namespace {

using namespace qk;

struct Q4CbCodes {
  static constexpr int64_t kChunkBytes = 64;
  // The vector dots are exact signed ones; the tail's use level + 128.
  static constexpr int kVecOffset = 0, kTailOffset = 128;
  __m256i lut;
  uint8_t lut_u[16];  // levels + 128, for the short last chunk
  explicit Q4CbCodes(const int8_t* codebook) {
    lut = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codebook)));
    for (int i = 0; i < 16; ++i) lut_u[i] = uint8_t(codebook[i] + 128);
  }
  // Lane dots of 32 nibbles (as levels) with 32 activations; |level|, |x| <= 127 keep maddubs's
  // pair sums below 2^15.
  __m256i dot32(__m256i nib, const int8_t* x) const {
    const __m256i lv = _mm256_shuffle_epi8(lut, nib);
    return dot_u8s8(_mm256_abs_epi8(lv), _mm256_sign_epi8(load256(x), lv));
  }
  __m256i dot(const uint8_t* c, const int8_t* x) const {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i v0 = load256(c), v1 = load256(c + 32);
    const __m256i lo0 = _mm256_and_si256(v0, m4), lo1 = _mm256_and_si256(v1, m4);
    const __m256i hi0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4);
    const __m256i hi1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4);
    return _mm256_add_epi32(_mm256_add_epi32(dot32(lo0, x), dot32(lo1, x + 32)),
                            _mm256_add_epi32(dot32(hi0, x + 64), dot32(hi1, x + 96)));
  }
  void tail(const uint8_t* c, const int8_t* x, int m, int32_t* isum) const {
    tail_block_dots_lut(c, x, m, lut_u, isum);
  }
};

// Row-major codes (w), any rows.
void matmul_q4cb_rows(const QuantMatmulArgs& a) {
  matmul_quant_avx2(a, Q4CbCodes(a.codebook));
}

void matmul_q4cb_avx2(const QuantMatmulArgs& a) {
  matmul_avx2_panels<DotSigned>(a, Q4CbPanelSigned(a.codebook), matmul_q4cb_rows,
                                [](auto&&...) { return false; });
}

void dequant_rows(const Tensor& w, int64_t r0, int64_t n, void* dst, bool bf16) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i lut =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.codebook)));
  dequant_rows_avx2(
      w, r0, n, dst, bf16, [&](const uint8_t* c, int64_t c0, int h, __m256i* n0, __m256i* n1) {
        const __m256i v0 = load256(c + c0 / 2), v1 = load256(c + c0 / 2 + 32);
        *n0 = _mm256_shuffle_epi8(
            lut, h ? _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4) : _mm256_and_si256(v0, m4));
        *n1 = _mm256_shuffle_epi8(
            lut, h ? _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4) : _mm256_and_si256(v1, m4));
      });
}

}  // namespace

void fill_matmul_q4cb_avx2(KernelTable& k) {
  k.matmul_q4cb = matmul_q4cb_avx2;
  k.dequant_q4cb = dequant_rows;
}

}  // namespace hearth::cpu
