// Q8 matmul, NEON: a row is 128-element chunks of 128 signed codes in slot order
// (quant/FORMAT.md): half 0 in bytes 0-63, half 1 in bytes 64-127, 4-byte lane i in block i mod 4.
// A 16-byte register of either half meets the same 16 bytes of the slot-ordered int8 activations
// on SDOT (dotprod CPUs) or on multiply-widen-pairwise-add, lane b of the result summing block b;
// decode and prefill share this int8 path (see matmul_quant_neon.h).
#include "backends/cpu/matmul_quant_neon.h"

namespace hearth::cpu {

namespace {

using namespace qk;

struct Q8Codes {
  static constexpr int64_t kChunkBytes = 128;
  static constexpr int kShift = 0;
  explicit Q8Codes(const int8_t*) {}
  static void pair(const uint8_t* c, int j, int8x16_t& w0, int8x16_t& w1) {
    w0 = vld1q_s8(reinterpret_cast<const int8_t*>(c) + 16 * j);
    w1 = vld1q_s8(reinterpret_cast<const int8_t*>(c) + 64 + 16 * j);
  }
  static int32_t code(const uint8_t* c, int m, int p, int h) { return int8_t(c[16 * m * h + p]); }
};

}  // namespace

void fill_matmul_q8_neon(KernelTable& k, const CpuFeatures& f) {
  k.matmul_q8 = matmul_plain<Q8Codes>;
#if HEARTH_NEON_HAVE_SDOT
  if (f.neon_dotprod) k.matmul_q8 = matmul_sdot<Q8Codes>;
#endif
  k.dequant_q8 = dequant_rows<Q8Codes>;
}

}  // namespace hearth::cpu
