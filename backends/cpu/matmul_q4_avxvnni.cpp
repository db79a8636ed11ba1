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
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i v0 = load256(c), v1 = load256(c + 32);
    __m256i acc =
        _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), _mm256_and_si256(v0, m4), load256(x));
    acc = _mm256_dpbusd_avx_epi32(acc, _mm256_and_si256(v1, m4), load256(x + 32));
    acc = _mm256_dpbusd_avx_epi32(acc, _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4),
                                  load256(x + 64));
    return _mm256_dpbusd_avx_epi32(acc, _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4),
                                   load256(x + 96));
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
