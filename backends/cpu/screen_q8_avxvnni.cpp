// The 5-bit screen of a Q8 LM head, AVX2 with AVX-VNNI (screen_q8_avx2.h): u x' products by
// vpdpbusd.
#include "backends/cpu/screen_q8_avx2.h"

namespace hearth::cpu {

namespace {

struct DotVnni {
  static __m256i dot(__m256i acc, __m256i u, __m256i s) {
    return _mm256_dpbusd_avx_epi32(acc, u, s);
  }
};

}  // namespace

void fill_screen_q8_avxvnni(KernelTable& k) {
  k.screen_q8 = qk::screen_q8_avx2<DotVnni>;
}

}  // namespace hearth::cpu
