// Q4-codebook matmul, NEON: bytes exactly as Q4 (quant/FORMAT.md: 64-byte chunks in slot order,
// byte p holding slot p of half 0 in its low nibble and of half 1 in its high nibble, 4-byte lane
// i in block i mod 4), but nibble n stands for the int8 level codebook[n], not n - 8.
// One TBL per nibble plane (the 16 levels held in a register for the whole call) gives the signed
// levels themselves, no offset and no factor, which meet the slot-ordered int8 activations on SDOT
// (dotprod CPUs) or on multiply-widen-pairwise-add: two level x activation products, each at most
// 127 x 127, still fit the int16 partials. Everything else is the Q4 path (matmul_quant_neon.h).
#include "backends/cpu/matmul_quant_neon.h"

namespace hearth::cpu {

namespace {

using namespace qk;

struct Q4CbCodes {
  static constexpr int64_t kChunkBytes = 64;
  static constexpr int kShift = 0;
  const int8_t* cb;
  int8x16_t levels;
  explicit Q4CbCodes(const int8_t* codebook) : cb(codebook), levels(vld1q_s8(codebook)) {}
  void pair(const uint8_t* c, int j, int8x16_t& w0, int8x16_t& w1) const {
    const uint8x16_t v = vld1q_u8(c + 16 * j);
    w0 = vqtbl1q_s8(levels, vandq_u8(v, vdupq_n_u8(0x0F)));
    w1 = vqtbl1q_s8(levels, vshrq_n_u8(v, 4));
  }
  int32_t code(const uint8_t* c, int m, int p, int h) const {
    return cb[h ? c[p] >> 4 : c[p] & 15];
  }
};

}  // namespace

void fill_matmul_q4cb_neon(KernelTable& k, const CpuFeatures& f) {
  k.matmul_q4cb = matmul_plain<Q4CbCodes>;
#if HEARTH_NEON_HAVE_SDOT
  if (f.neon_dotprod) k.matmul_q4cb = matmul_sdot<Q4CbCodes>;
#endif
  k.dequant_q4cb = dequant_rows<Q4CbCodes>;
}

}  // namespace hearth::cpu
