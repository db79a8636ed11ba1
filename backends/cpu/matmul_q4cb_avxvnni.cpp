// Q4-codebook matmul, AVX2 with AVX-VNNI (Intel since Alder Lake, AMD Zen 5): the AVX2 kernel's
// layout and loop (matmul_q4cb_avx2.cpp: Q4's 64-byte chunks in slot order, each nibble an index
// into the 16 int8 levels), each 32 levels multiplied into the int32 lanes by one vpdpbusd (|level|
// against the activation carrying the level's sign) instead of maddubs and madd: the same exact
// integer dots. Prefill looks the levels up into panels for the int8 GEMM
// (matmul_quant_gemm_avxvnni.h) as level + 128. The backend's copy (w_il) is Q4's 16-row panels
// (q4_panel.h), read by matmul_panel_avx2.h as levels + 128.
#include "backends/cpu/matmul_quant_gemm_avxvnni.h"

namespace hearth::cpu {

namespace {

using namespace qk;

struct Q4CbCodesVnni {
  static constexpr int64_t kChunkBytes = 64;
  // The vector dots are exact signed ones; the tail's and the GEMM's use level + 128.
  static constexpr int kVecOffset = 0, kTailOffset = 128, kOffsetLog2 = 7;
  __m256i lut;         // the levels (decode)
  __m256i lut_offset;  // levels + 128 (the GEMM's panels)
  uint8_t lut_u[16];   // levels + 128, for the tail and a short last chunk
  explicit Q4CbCodesVnni(const int8_t* codebook) {
    lut = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codebook)));
    for (int i = 0; i < 16; ++i) lut_u[i] = uint8_t(codebook[i] + 128);
    lut_offset =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lut_u)));
  }
  static __m256i dot32(__m256i acc, __m256i lv, const int8_t* x) {
    return _mm256_dpbusd_avx_epi32(acc, _mm256_abs_epi8(lv), _mm256_sign_epi8(load256(x), lv));
  }
  __m256i dot(const uint8_t* c, const int8_t* x) const {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i v0 = load256(c), v1 = load256(c + 32);
    __m256i acc =
        dot32(_mm256_setzero_si256(), _mm256_shuffle_epi8(lut, _mm256_and_si256(v0, m4)), x);
    acc = dot32(acc, _mm256_shuffle_epi8(lut, _mm256_and_si256(v1, m4)), x + 32);
    acc = dot32(acc, _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4)),
                x + 64);
    return dot32(acc, _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4)),
                 x + 96);
  }
  void tail(const uint8_t* c, const int8_t* x, int m, int32_t* isum) const {
    tail_block_dots_lut(c, x, m, lut_u, isum);
  }
  // The GEMM's panels: slot lane L of both halves as level + 128.
  void dwords(const uint8_t* c, int, int L, uint32_t* h0, uint32_t* h1) const {
    uint32_t lo = 0, hi = 0;
    for (int e = 0; e < 4; ++e) {
      const uint8_t byte = c[4 * L + e];
      lo |= uint32_t(lut_u[byte & 15]) << (8 * e);
      hi |= uint32_t(lut_u[byte >> 4]) << (8 * e);
    }
    *h0 = lo, *h1 = hi;
  }
  void lanes8(const uint8_t* const rows[8], int L0, __m256i* h0, __m256i* h1) const {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i t[8];
    transpose8(rows, 4 * L0, t);
    for (int j = 0; j < 8; ++j) {
      h0[j] = _mm256_shuffle_epi8(lut_offset, _mm256_and_si256(t[j], m4));
      h1[j] = _mm256_shuffle_epi8(lut_offset, _mm256_and_si256(_mm256_srli_epi16(t[j], 4), m4));
    }
  }
};

// Row-major codes (w), any rows.
void matmul_q4cb_rows(const QuantMatmulArgs& a) {
  const Q4CbCodesVnni cd(a.codebook);
  if (a.n_tokens >= kPrefillTokens) return gemm_quant(a, cd);
  matmul_quant_avx2(a, cd);
}

void matmul_q4cb_avxvnni(const QuantMatmulArgs& a) {
  const Q4CbPanelAvx2 f(a.codebook);
  matmul_avx2_panels<DotVnni>(a, f, matmul_q4cb_rows, PanelGemm<Q4CbPanelAvx2>{f});
}

}  // namespace

void fill_matmul_q4cb_avxvnni(KernelTable& k) {
  k.matmul_q4cb = matmul_q4cb_avxvnni;
  fill_quant_prefill(k);
}

}  // namespace hearth::cpu
