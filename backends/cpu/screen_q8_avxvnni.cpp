// The 5-bit screen of a Q8 LM head, AVX2 with AVX-VNNI (screen_q8_avx2.h): u x' products by
// vpdpbusd.
#include "backends/cpu/screen_q8_avx2.h"

namespace hearth::cpu {

void fill_screen_q8_avxvnni(KernelTable& k) {
  k.screen_q8 = qk::screen_q8_avx2<qk::DotVnni>;
}

}  // namespace hearth::cpu
