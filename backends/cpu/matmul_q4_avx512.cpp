// Q4 matmul, AVX-512 VNNI + BF16. A row is 128-element chunks of 64 bytes in slot order
// (quant/FORMAT.md): byte p holds slot p of the chunk's first half in its low nibble and of its
// second half in its high nibble, as q + 8, and 4-byte lane i belongs to block i mod 4. Decode
// multiplies both nibble planes with the int8 activations (in the same slot order) on vpdpbusd
// into one integer accumulator that starts from the activations' offset lanes (removing the +8
// exactly), and scales lanes by one broadcast of the chunk's 4 block factors; prefill repacks
// panels of rows for the int8 GEMM (matmul_quant_gemm_avx512.h). The backend's copy (w_il) is
// 16-row panels (q4_panel.h), read by matmul_q4_panel_avx512.h.
#include "backends/cpu/matmul_q4_panel_avx512.h"

namespace hearth::cpu {

namespace {

using namespace qk;

struct Q4Codes {
  static constexpr int kOffsetLog2 = 3;  // nibbles hold q + 8
  // Decode rows per pass of row-major codes (--mmap, rows outside whole panels): 8 x 64-byte
  // chunks. The backend's copy is panels (matmul_q4_panel_avx512.h).
  static constexpr int kDecodeRows = 8;
  static constexpr int64_t kChunkBytes = 64;
  static __m512i dot(const uint8_t* c, __m512i xa, __m512i xb, __m512i init) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i v = _mm512_loadu_si512(c);
    prefetch(c + kPrefetchAhead);
    const __m512i lo = _mm512_and_si512(v, m4);
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(init, lo, xa), hi, xb);
  }
  // dot's two operand vectors (dot = dpbusd(dpbusd(init, h0, xa), h1, xb)), for several tokens.
  static constexpr bool kHasOperands = true;
  static void operands(const uint8_t* c, __m512i* h0, __m512i* h1) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i v = _mm512_loadu_si512(c);
    prefetch(c + kPrefetchAhead);
    *h0 = _mm512_and_si512(v, m4);
    *h1 = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
  }
  static void tail(const uint8_t* c, const int8_t* x, int m, int32_t* isum) {
    tail_dots_q4(c, x, m, isum);
  }
  static void gather(const uint8_t* row0, __m512i offs, __mmask16 valid, int64_t chunk_byte, int,
                     int L, __m512i* h0, __m512i* h1) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i v = _mm512_mask_i32gather_epi32(
        _mm512_setzero_si512(), valid,
        _mm512_add_epi32(offs, _mm512_set1_epi32(int32_t(chunk_byte + 4 * L))), row0, 1);
    *h0 = _mm512_and_si512(v, m4);
    *h1 = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
  }
  static void lanes16(const uint8_t* const rows[16], __m512i* h0, __m512i* h1) {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i t[16];
    transpose16(rows, 0, t);
    for (int j = 0; j < 16; ++j) {
      h0[j] = _mm512_and_si512(t[j], m4);
      h1[j] = _mm512_and_si512(_mm512_srli_epi16(t[j], 4), m4);
    }
  }
};

// One row in element order, as bf16 or f32: nibble - 8 times its group's scale.
template <int G, bool BF16>
void dequant_row(const uint8_t* s, const uint16_t* scales, DType st, int64_t k, void* dst) {
  const int64_t kc = k / kChunk * kChunk;
  const __m512i m4 = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8);
  for (int64_t c0 = 0; c0 < kc; c0 += kChunk) {
    const __m512i v = _mm512_loadu_si512(s + c0 / 2);
    const __m512i lo = _mm512_sub_epi8(_mm512_and_si512(v, m4), eight);
    const __m512i hi = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16(v, 4), m4), eight);
    store_chunk_i8<G, BF16>(slots_to_blocks(lo), slots_to_blocks(hi), scales, st, c0, dst);
  }
  dequant_tail<G, BF16>(k, scales, st, dst, [&](int h, int p) {
    const uint8_t byte = s[kc / 2 + p];
    return (h ? byte >> 4 : byte & 15) - 8;
  });
}

// Row-major codes (w), any rows.
template <int G>
void matmul_q4_rows(const QuantMatmulArgs& a) {
  if (a.n_tokens < kPrefillTokens) return decode_quant<Q4Codes, G>(a);
  gemm_quant<Q4Codes, G>(a);
}

template <int G>
void matmul_q4_avx512_g(const QuantMatmulArgs& a) {
  if (!a.w_il) return matmul_q4_rows<G>(a);
  if (a.scale_dtype == DType::BF16)
    return matmul_panel<Q4Panel, G, DType::BF16>(a, Q4Panel(), matmul_q4_rows<G>);
  matmul_panel<Q4Panel, G, DType::F16>(a, Q4Panel(), matmul_q4_rows<G>);
}

void dequant_rows(const Tensor& w, int64_t r0, int64_t n, void* dst, bool bf16) {
  dequant_rows_with<Q4Codes::kChunkBytes>(
      w, r0, n, dst, bf16,
      [&](auto g, auto to_bf16, const uint8_t* c, const uint16_t* s, auto* out) {
        dequant_row<decltype(g)::value, decltype(to_bf16)::value>(c, s, w.scale_dtype, w.cols(),
                                                                  out);
      });
}

void matmul_q4_avx512(const QuantMatmulArgs& a) {
  with_group(a.group, [&](auto g) { matmul_q4_avx512_g<decltype(g)::value>(a); });
}

}  // namespace

void fill_matmul_q4_avx512(KernelTable& k) {
  k.matmul_q4 = matmul_q4_avx512;
  k.q4_panel = true;
  fill_quant_prefill(k);
  k.dequant_q4 = dequant_rows;
}

}  // namespace hearth::cpu
