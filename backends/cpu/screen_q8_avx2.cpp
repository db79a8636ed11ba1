// The 5-bit screen of a Q8 LM head, AVX2 (screen_q8_avx2.h): u x' products by maddubs and madd.
// u is at most 31, so a pair of products stays below 2^15. Also a BF16 head's screen rows
// (screen_row.h) on 32-byte vectors.
#include "backends/cpu/screen_q8_avx2.h"

#include "backends/cpu/screen_row.h"

namespace hearth::cpu {

void fill_screen_q8_avx2(KernelTable& k) {
  k.screen_q8 = qk::screen_q8_avx2<qk::DotMaddubs>;
  k.screen_row_bf16 = screen_row<32>;
}

}  // namespace hearth::cpu
