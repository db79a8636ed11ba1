// Q8 matmul, AVX2: 128-element chunks of 128 bytes in slot order (quant/FORMAT.md), 4-byte lane i
// in block i mod 4, against int8 activations in the same slot order, 32 bytes at a time with
// maddubs on |code| and the activation carrying the code's sign; one broadcast of the chunk's 4
// block factors scales the lanes. The backend's copy (w_il) is 16-row panels (q8_panel.h), read by
// matmul_panel_avx2.h as signed codes.
#include "backends/cpu/matmul_panel_avx2.h"

namespace hearth::cpu {

namespace {

using namespace qk;

struct Q8Codes {
  static constexpr int64_t kChunkBytes = 128;
  // The vector dots are exact signed ones; the tail's use q + 128.
  static constexpr int kVecOffset = 0, kTailOffset = 128;
  static __m256i dot32(const uint8_t* w, const int8_t* x) {
    const __m256i wv = load256(w);
    return dot_u8s8(_mm256_abs_epi8(wv), _mm256_sign_epi8(load256(x), wv));
  }
  static __m256i dot(const uint8_t* c, const int8_t* x) {
    return _mm256_add_epi32(_mm256_add_epi32(dot32(c, x), dot32(c + 32, x + 32)),
                            _mm256_add_epi32(dot32(c + 64, x + 64), dot32(c + 96, x + 96)));
  }
  static void tail(const uint8_t* c, const int8_t* x, int m, int32_t* isum) {
    tail_block_dots(8, c, x, m, isum);
  }
};

// Row-major codes (w), any rows.
void matmul_q8_rows(const QuantMatmulArgs& a) {
  matmul_quant_avx2(a, Q8Codes());
}

void matmul_q8_avx2(const QuantMatmulArgs& a) {
  matmul_avx2_panels<DotSigned>(a, Q8PanelSigned(), matmul_q8_rows,
                                [](auto&&...) { return false; });
}

// Half h of a chunk is its 64 bytes at c0 + 64 h.
void dequant_rows(const Tensor& w, int64_t r0, int64_t n, void* dst, bool bf16) {
  dequant_rows_avx2(w, r0, n, dst, bf16,
                    [&](const uint8_t* c, int64_t c0, int h, __m256i* n0, __m256i* n1) {
                      *n0 = load256(c + c0 + 64 * h);
                      *n1 = load256(c + c0 + 64 * h + 32);
                    });
}

}  // namespace

void fill_matmul_q8_avx2(KernelTable& k) {
  k.matmul_q8 = matmul_q8_avx2;
  k.q8_panel = true;
  k.dequant_q8 = dequant_rows;
}

}  // namespace hearth::cpu
