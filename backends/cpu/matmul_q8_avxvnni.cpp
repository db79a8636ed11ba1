// Q8 matmul, AVX2 with AVX-VNNI (Intel since Alder Lake, AMD Zen 5): the AVX2 kernel's layout and
// loop (matmul_q8_avx2.cpp: 128-byte chunks in slot order, |code| against the activation carrying
// the code's sign), each 32 bytes multiplied into the int32 lanes by one vpdpbusd instead of
// maddubs and madd: the same exact integer dots.
#include "backends/cpu/matmul_quant_avx2.h"

namespace hearth::cpu {

namespace {

using namespace qk;

struct Q8CodesVnni {
  static constexpr int64_t kChunkBytes = 128;
  // The vector dots are exact signed ones; the tail's use q + 128.
  static constexpr int kVecOffset = 0, kTailOffset = 128;
  static __m256i dot32(__m256i acc, const uint8_t* w, const int8_t* x) {
    const __m256i wv = load256(w);
    return _mm256_dpbusd_avx_epi32(acc, _mm256_abs_epi8(wv), _mm256_sign_epi8(load256(x), wv));
  }
  static __m256i dot(const uint8_t* c, const int8_t* x) {
    __m256i acc = dot32(_mm256_setzero_si256(), c, x);
    acc = dot32(acc, c + 32, x + 32);
    acc = dot32(acc, c + 64, x + 64);
    return dot32(acc, c + 96, x + 96);
  }
  static void tail(const uint8_t* c, const int8_t* x, int m, int32_t* isum) {
    tail_block_dots(8, c, x, m, isum);
  }
};

void matmul_q8_avxvnni(const QuantMatmulArgs& a) {
  matmul_quant_avx2(a, Q8CodesVnni());
}

}  // namespace

void fill_matmul_q8_avxvnni(KernelTable& k) {
  k.matmul_q8 = matmul_q8_avxvnni;
}

}  // namespace hearth::cpu
