// Q4 matmul, AVX2 with AVX-VNNI (Intel since Alder Lake, AMD Zen 5): the AVX2 kernel's layout and
// loop (matmul_q4_avx2.cpp: 64-byte chunks of nibbles in slot order, low nibbles the first half),
// each chunk's four nibble vectors multiplied into the int32 lanes by vpdpbusd instead of
// maddubs, 16-bit adds and madd: the same exact integer dots in 4 instructions instead of 8.
// Prefill repacks panels of rows for the int8 GEMM (matmul_quant_gemm_avxvnni.h). The backend's
// copy (w_il) is 16-row panels (q4_panel.h), read by matmul_panel_avx2.h.
#include "backends/cpu/matmul_quant_gemm_avxvnni.h"

namespace hearth::cpu {

namespace {

using namespace qk;

struct Q4CodesVnni {
  static constexpr int64_t kChunkBytes = 64;
  static constexpr int kVecOffset = 8, kTailOffset = 8;  // nibbles hold q + 8
  static __m256i dot(const uint8_t* c, const int8_t* x) {
    __m256i n[4];
    q4_nibbles(c, n);
    __m256i acc = _mm256_setzero_si256();
    for (int i = 0; i < 4; ++i) acc = _mm256_dpbusd_avx_epi32(acc, n[i], load256(x + 32 * i));
    return acc;
  }
  static void tail(const uint8_t* c, const int8_t* x, int m, int32_t* isum) {
    tail_block_dots(4, c, x, m, isum);
  }
  // The GEMM's panels: slot lane L of both halves, nibbles as they are (q + 8).
  static constexpr int kOffsetLog2 = 3;
  static void dwords(const uint8_t* c, int, int L, uint32_t* h0, uint32_t* h1) {
    uint32_t v;
    std::memcpy(&v, c + 4 * L, 4);
    *h0 = v & 0x0F0F0F0Fu;
    *h1 = (v >> 4) & 0x0F0F0F0Fu;
  }
  static void lanes8(const uint8_t* const rows[8], int L0, __m256i* h0, __m256i* h1) {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    __m256i t[8];
    transpose8(rows, 4 * L0, t);
    for (int j = 0; j < 8; ++j) {
      h0[j] = _mm256_and_si256(t[j], m4);
      h1[j] = _mm256_and_si256(_mm256_srli_epi16(t[j], 4), m4);
    }
  }
};

// Row-major codes (w), any rows.
void matmul_q4_rows(const QuantMatmulArgs& a) {
  if (a.n_tokens >= kPrefillTokens) return gemm_quant(a, Q4CodesVnni());
  matmul_quant_avx2(a, Q4CodesVnni());
}

void matmul_q4_avxvnni(const QuantMatmulArgs& a) {
  matmul_avx2_panels<DotVnni>(a, Q4PanelAvx2(), matmul_q4_rows, PanelGemm<Q4PanelAvx2>());
}

}  // namespace

void fill_matmul_q4_avxvnni(KernelTable& k) {
  k.matmul_q4 = matmul_q4_avxvnni;
  k.q4_panel = true;
  fill_quant_prefill(k);
}

}  // namespace hearth::cpu
