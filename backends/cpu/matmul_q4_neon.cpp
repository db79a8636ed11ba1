// Q4 matmul, NEON: a row is 128-element chunks of 64 bytes in slot order (quant/FORMAT.md): byte p
// holds slot p of half 0 in its low nibble and of half 1 in its high nibble, as q + 8, and 4-byte
// lane i belongs to block i mod 4. XOR 0x88 makes each nibble q in 4-bit two's complement; shifted
// to (or masked at) the top of a byte it is the int8 value 16 q, which meets the slot-ordered int8
// activations on SDOT (dotprod CPUs) or on multiply-widen-pairwise-add, lane b summing block b; the
// 16 goes into the final scale. Decode and prefill share this int8 path (matmul_quant_neon.h).
#include "backends/cpu/matmul_quant_neon.h"

namespace hearth::cpu {

namespace {

using namespace qk;

struct Q4Codes {
  static constexpr int64_t kChunkBytes = 64;
  static constexpr int kShift = 4;
  explicit Q4Codes(const int8_t*) {}
  static void pair(const uint8_t* c, int j, int8x16_t& w0, int8x16_t& w1) {
    const uint8x16_t v = veorq_u8(vld1q_u8(c + 16 * j), vdupq_n_u8(0x88));
    w0 = vreinterpretq_s8_u8(vshlq_n_u8(v, 4));
    w1 = vreinterpretq_s8_u8(vandq_u8(v, vdupq_n_u8(0xF0)));
  }
  static int32_t code(const uint8_t* c, int m, int p, int h) {
    return int32_t(h ? c[p] >> 4 : c[p] & 15) - 8;
  }
};

}  // namespace

void fill_matmul_q4_neon(KernelTable& k, const CpuFeatures& f) {
  k.matmul_q4 = matmul_plain<Q4Codes>;
#if HEARTH_NEON_HAVE_SDOT
  if (f.neon_dotprod) k.matmul_q4 = matmul_sdot<Q4Codes>;
#endif
  k.dequant_q4 = dequant_rows<Q4Codes>;
}

}  // namespace hearth::cpu
