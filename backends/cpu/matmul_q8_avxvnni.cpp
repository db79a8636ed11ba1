// Q8 matmul, AVX2 with AVX-VNNI (Intel since Alder Lake, AMD Zen 5): the AVX2 kernel's layout and
// loop (matmul_q8_avx2.cpp: 128-byte chunks in slot order), each 32 bytes of codes + 128 multiplied
// into the int32 lanes by one vpdpbusd (dpbusd_chunk), the offset taken off per row. Prefill
// repacks panels of rows for the int8 GEMM (matmul_quant_gemm_avxvnni.h). The backend's copy
// (w_il) is 16-row panels (q8_panel.h), read by matmul_panel_avx2.h.
#include "backends/cpu/matmul_quant_gemm_avxvnni.h"

namespace hearth::cpu {

namespace {

using namespace qk;

struct Q8CodesVnni {
  static constexpr int64_t kChunkBytes = 128;
  // The codes go in as q + 128 (their sign bits flipped): one vpdpbusd per 32 bytes, where |q|
  // against x carrying q's sign took three operations; 128 x (each block's sum of x) comes off
  // once per row, as Q4's + 8 does.
  static constexpr int kVecOffset = 128, kTailOffset = 128;
  static __m256i dot(const uint8_t* c, const int8_t* x) {
    const __m256i flip = _mm256_set1_epi8(char(0x80));
    __m256i u[4], s[4];
    for (int i = 0; i < 4; ++i) {
      u[i] = _mm256_xor_si256(load256(c + 32 * i), flip);
      s[i] = load256(x + 32 * i);
    }
    return dpbusd_chunk(u, s);
  }
  static void tail(const uint8_t* c, const int8_t* x, int m, int32_t* isum) {
    tail_block_dots(8, c, x, m, isum);
  }
  // The GEMM's panels: slot lane L of both halves (16m bytes apart) as q + 128.
  static constexpr int kOffsetLog2 = 7;
  static void dwords(const uint8_t* c, int m, int L, uint32_t* h0, uint32_t* h1) {
    uint32_t v0, v1;
    std::memcpy(&v0, c + 4 * L, 4);
    std::memcpy(&v1, c + 16 * m + 4 * L, 4);
    *h0 = v0 ^ 0x80808080u;
    *h1 = v1 ^ 0x80808080u;
  }
  static void lanes8(const uint8_t* const rows[8], int L0, __m256i* h0, __m256i* h1) {
    const __m256i flip = _mm256_set1_epi8(-128);
    transpose8(rows, 4 * L0, h0);
    transpose8(rows, 64 + 4 * L0, h1);
    for (int j = 0; j < 8; ++j) {
      h0[j] = _mm256_xor_si256(h0[j], flip);
      h1[j] = _mm256_xor_si256(h1[j], flip);
    }
  }
};

// Row-major codes (w), any rows.
void matmul_q8_rows(const QuantMatmulArgs& a) {
  if (a.n_tokens >= kPrefillTokens) return gemm_quant(a, Q8CodesVnni());
  matmul_quant_avx2(a, Q8CodesVnni());
}

void matmul_q8_avxvnni(const QuantMatmulArgs& a) {
  matmul_avx2_panels<DotVnni>(a, Q8PanelAvx2(), matmul_q8_rows, PanelGemm<Q8PanelAvx2>());
}

}  // namespace

void fill_matmul_q8_avxvnni(KernelTable& k) {
  k.matmul_q8 = matmul_q8_avxvnni;
  k.q8_panel = true;
  fill_quant_prefill(k);
}

}  // namespace hearth::cpu
