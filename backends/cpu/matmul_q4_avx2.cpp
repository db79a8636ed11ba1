// Q4 matmul, AVX2: 128-element chunks of 64 bytes in slot order (quant/FORMAT.md), low nibbles
// the chunk's first half and high nibbles its second, as q + 8, 4-byte lane i in block i mod 4.
// maddubs multiplies nibbles with int8 activations in the same slot order; the four products of a
// chunk add in 16 bits (each at most 2 * 15 * 127) before widening, then one broadcast of the
// chunk's 4 block factors scales the lanes; the +8 is removed per block afterwards. The backend's
// copy (w_il) is 16-row panels (q4_panel.h), read by matmul_panel_avx2.h.
#include "backends/cpu/matmul_panel_avx2.h"

namespace hearth::cpu {

namespace {

using namespace qk;

struct Q4Codes {
  static constexpr int64_t kChunkBytes = 64;
  static constexpr int kVecOffset = 8, kTailOffset = 8;  // nibbles hold q + 8
  static __m256i dot(const uint8_t* c, const int8_t* x) {
    __m256i n[4];
    q4_nibbles(c, n);
    __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(n[0], load256(x)),
                                   _mm256_maddubs_epi16(n[1], load256(x + 32)));
    s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(n[2], load256(x + 64)));
    s16 = _mm256_add_epi16(s16, _mm256_maddubs_epi16(n[3], load256(x + 96)));
    return _mm256_madd_epi16(s16, _mm256_set1_epi16(1));
  }
  static void tail(const uint8_t* c, const int8_t* x, int m, int32_t* isum) {
    tail_block_dots(4, c, x, m, isum);
  }
};

// Row-major codes (w), any rows.
void matmul_q4_rows(const QuantMatmulArgs& a) {
  matmul_quant_avx2(a, Q4Codes());
}

void matmul_q4_avx2(const QuantMatmulArgs& a) {
  matmul_avx2_panels<DotMaddubs>(a, Q4PanelAvx2(), matmul_q4_rows, [](auto&&...) { return false; });
}

// Nibbles minus 8.
void dequant_rows(const Tensor& w, int64_t r0, int64_t n, void* dst, bool bf16) {
  const __m256i m4 = _mm256_set1_epi8(0x0F), eight = _mm256_set1_epi8(8);
  dequant_rows_avx2(
      w, r0, n, dst, bf16, [&](const uint8_t* c, int64_t c0, int h, __m256i* n0, __m256i* n1) {
        const __m256i v0 = load256(c + c0 / 2), v1 = load256(c + c0 / 2 + 32);
        *n0 = _mm256_sub_epi8(
            h ? _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4) : _mm256_and_si256(v0, m4), eight);
        *n1 = _mm256_sub_epi8(
            h ? _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4) : _mm256_and_si256(v1, m4), eight);
      });
}

}  // namespace

void fill_matmul_q4_avx2(KernelTable& k) {
  k.matmul_q4 = matmul_q4_avx2;
  k.q4_panel = true;
  k.dequant_q4 = dequant_rows;
}

}  // namespace hearth::cpu
