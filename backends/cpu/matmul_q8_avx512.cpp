// Q8 matmul, AVX-512 VNNI + BF16. A row is 128-element chunks of 128 bytes in slot order
// (quant/FORMAT.md): two 64-byte halves whose 4-byte lane i belongs to block i mod 4. Decode flips
// each code's sign bit to get q + 128 as the unsigned operand of vpdpbusd against int8 activations
// in the same slot order, both halves into one integer accumulator, scales lanes by one broadcast
// of the chunk's 4 block factors; the +128 is removed exactly by starting each chunk's integer dot
// from the activations' offset lanes (matmul_quant_avx512.h). Prefill repacks panels of rows for
// the int8 GEMM (matmul_quant_gemm_avx512.h). The packed copy (MatmulArgs::w_il) is 16-row panels
// (q8_panel.h), read by matmul_q8_panel_avx512.h.
#include "backends/cpu/matmul_q8_panel_avx512.h"

namespace hearth::cpu {

namespace {

using namespace qk;

struct Q8Codes {
  static constexpr int kOffsetLog2 = 7;  // sign bit flipped: q + 128
  // Decode rows per pass: 4 x 128-byte chunks (8 measured slower on Zen 5: 8 row streams).
  static constexpr int kDecodeRows = 4;
  static constexpr int64_t kChunkBytes = 128;
  static __m512i dot(const uint8_t* c, __m512i xa, __m512i xb, __m512i init) {
    const __m512i flip = _mm512_set1_epi8(char(0x80));
    const __m512i u0 = _mm512_xor_si512(_mm512_loadu_si512(c), flip);
    const __m512i u1 = _mm512_xor_si512(_mm512_loadu_si512(c + 64), flip);
    prefetch(c + kPrefetchAhead);
    prefetch(c + kPrefetchAhead + 64);
    return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(init, u0, xa), u1, xb);
  }
  // dot's two operand vectors (dot = dpbusd(dpbusd(init, h0, xa), h1, xb)), for several tokens.
  static constexpr bool kHasOperands = true;
  static void operands(const uint8_t* c, __m512i* h0, __m512i* h1) {
    const __m512i flip = _mm512_set1_epi8(char(0x80));
    *h0 = _mm512_xor_si512(_mm512_loadu_si512(c), flip);
    *h1 = _mm512_xor_si512(_mm512_loadu_si512(c + 64), flip);
    prefetch(c + kPrefetchAhead);
    prefetch(c + kPrefetchAhead + 64);
  }
  static void tail(const uint8_t* c, const int8_t* x, int m, int32_t* isum) {
    tail_dots_q8(c, x, m, isum);
  }
  static void gather(const uint8_t* row0, __m512i offs, __mmask16 valid, int64_t chunk_byte, int m,
                     int L, __m512i* h0, __m512i* h1) {
    const __m512i flip = _mm512_set1_epi8(char(0x80));
    const __m512i at = _mm512_add_epi32(offs, _mm512_set1_epi32(int32_t(chunk_byte + 4 * L)));
    const __m512i z = _mm512_setzero_si512();
    *h0 = _mm512_xor_si512(_mm512_mask_i32gather_epi32(z, valid, at, row0, 1), flip);
    *h1 = _mm512_xor_si512(_mm512_mask_i32gather_epi32(z, valid, at, row0 + 16 * m, 1), flip);
  }
  static void lanes16(const uint8_t* const rows[16], __m512i* h0, __m512i* h1) {
    const __m512i flip = _mm512_set1_epi8(char(0x80));
    transpose16(rows, 0, h0);
    transpose16(rows, 64, h1);
    for (int j = 0; j < 16; ++j) {
      h0[j] = _mm512_xor_si512(h0[j], flip);
      h1[j] = _mm512_xor_si512(h1[j], flip);
    }
  }
};

// One row in element order, as bf16 or f32.
template <int G, bool BF16>
void dequant_row(const uint8_t* c, const uint16_t* scales, DType st, int64_t k, void* dst) {
  const int64_t kc = k / kChunk * kChunk;
  for (int64_t c0 = 0; c0 < kc; c0 += kChunk)
    store_chunk_i8<G, BF16>(slots_to_blocks(_mm512_loadu_si512(c + c0)),
                            slots_to_blocks(_mm512_loadu_si512(c + c0 + 64)), scales, st, c0, dst);
  const int m = int((k - kc) / kBlock);
  dequant_tail<G, BF16>(k, scales, st, dst,
                        [&](int h, int p) { return int8_t(c[kc + 16 * m * h + p]); });
}

// Row-major codes (w), any rows.
template <int G>
void matmul_q8_rows(const QuantMatmulArgs& a) {
  if (a.n_tokens < kPrefillTokens) return decode_quant<Q8Codes, G>(a);
  gemm_quant<Q8Codes, G>(a);
}

template <int G>
void matmul_q8_avx512_g(const QuantMatmulArgs& a) {
  if (!a.w_il) return matmul_q8_rows<G>(a);
  if (a.scale_dtype == DType::BF16)
    return matmul_panel<Q8Panel, G, DType::BF16>(a, Q8Panel(), matmul_q8_rows<G>);
  matmul_panel<Q8Panel, G, DType::F16>(a, Q8Panel(), matmul_q8_rows<G>);
}

void dequant_rows(const Tensor& w, int64_t r0, int64_t n, void* dst, bool bf16) {
  dequant_rows_with<Q8Codes::kChunkBytes>(
      w, r0, n, dst, bf16,
      [&](auto g, auto to_bf16, const uint8_t* c, const uint16_t* s, auto* out) {
        dequant_row<decltype(g)::value, decltype(to_bf16)::value>(c, s, w.scale_dtype, w.cols(),
                                                                  out);
      });
}

void matmul_q8_avx512(const QuantMatmulArgs& a) {
  with_group(a.group, [&](auto g) { matmul_q8_avx512_g<decltype(g)::value>(a); });
}

}  // namespace

void fill_matmul_q8_avx512(KernelTable& k) {
  k.matmul_q8 = matmul_q8_avx512;
  k.q8_panel = true;
  fill_quant_prefill(k);
  k.dequant_q8 = dequant_rows;
}

}  // namespace hearth::cpu
