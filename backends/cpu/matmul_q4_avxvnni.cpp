// Q4 matmul, AVX2 with AVX-VNNI (Intel since Alder Lake, AMD Zen 5): the AVX2 kernel's layout and
// loop (matmul_q4_avx2.cpp: 64-byte chunks of nibbles in slot order, low nibbles the first half),
// each chunk's four nibble vectors multiplied into the int32 lanes by vpdpbusd instead of
// maddubs, 16-bit adds and madd: the same exact integer dots in 4 instructions instead of 8.
#include "backends/cpu/matmul_quant_avx2.h"

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
};

void matmul_q4_avxvnni(const QuantMatmulArgs& a) {
  matmul_quant_avx2(a, Q4CodesVnni());
}

}  // namespace

void fill_matmul_q4_avxvnni(KernelTable& k) {
  k.matmul_q4 = matmul_q4_avxvnni;
}

}  // namespace hearth::cpu
