// Q4-codebook matmul, AVX-512 VNNI + BF16: Q4's 128-element chunks of 64 bytes in slot order
// (quant/FORMAT.md), byte p holding slot p of the chunk's first half in its low nibble and of its
// second half in its high nibble, 4-byte lane i in block i mod 4, each nibble an index into the 16
// int8 levels. Decode looks both nibble planes up with vpshufb in a table of level + 128, the
// unsigned operand of vpdpbusd against the int8 activations (same slot order), into one integer
// accumulator that starts from the activations' offset lanes (removing the +128 exactly, as Q8
// does); prefill looks levels up the same way into panels for the int8 GEMM. The backend's copy
// (w_il) is Q4's 16-row panels (q4_panel.h), read by matmul_q4_panel_avx512.h with the same
// lookup.
#include "backends/cpu/matmul_q4_panel_avx512.h"

namespace hearth::cpu {

namespace {

using namespace qk;

struct Q4CbCodes {
  static constexpr int kOffsetLog2 = 7;  // the table holds level + 128
  // Decode rows per pass of row-major codes (--mmap, rows outside whole panels).
  static constexpr int kDecodeRows = 8;
  static constexpr int64_t kChunkBytes = 64;
  __m512i lut;
  uint8_t lut_u[16];
  explicit Q4CbCodes(const int8_t* codebook) {
    for (int i = 0; i < 16; ++i) lut_u[i] = uint8_t(codebook[i] + 128);
    lut = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(lut_u)));
  }
  __m512i dot(const uint8_t* c, __m512i xa, __m512i xb, __m512i init) const {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i v = _mm512_loadu_si512(c);
    prefetch(c + kPrefetchAhead);
    const __m512i lo = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m4));
    const __m512i hi = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
    return _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(init, lo, xa), hi, xb);
  }
  // dot's two operand vectors (dot = dpbusd(dpbusd(init, h0, xa), h1, xb)), for several tokens.
  static constexpr bool kHasOperands = true;
  void operands(const uint8_t* c, __m512i* h0, __m512i* h1) const {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i v = _mm512_loadu_si512(c);
    prefetch(c + kPrefetchAhead);
    *h0 = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m4));
    *h1 = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
  }
  void tail(const uint8_t* c, const int8_t* x, int m, int32_t* isum) const {
    tail_block_dots_lut(c, x, m, lut_u, isum);
  }
  void gather(const uint8_t* row0, __m512i offs, __mmask16 valid, int64_t chunk_byte, int, int L,
              __m512i* h0, __m512i* h1) const {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    const __m512i v = _mm512_mask_i32gather_epi32(
        _mm512_setzero_si512(), valid,
        _mm512_add_epi32(offs, _mm512_set1_epi32(int32_t(chunk_byte + 4 * L))), row0, 1);
    *h0 = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m4));
    *h1 = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
  }
  void lanes16(const uint8_t* const rows[16], __m512i* h0, __m512i* h1) const {
    const __m512i m4 = _mm512_set1_epi8(0x0F);
    __m512i t[16];
    transpose16(rows, 0, t);
    for (int j = 0; j < 16; ++j) {
      h0[j] = _mm512_shuffle_epi8(lut, _mm512_and_si512(t[j], m4));
      h1[j] = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(t[j], 4), m4));
    }
  }
};

// One row in element order, as bf16 or f32: codebook[nibble] times its group's scale.
template <int G, bool BF16>
void dequant_row(const uint8_t* s, const uint16_t* scales, DType st, const int8_t* cb, int64_t k,
                 void* dst) {
  const int64_t kc = k / kChunk * kChunk;
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(cb)));
  for (int64_t c0 = 0; c0 < kc; c0 += kChunk) {
    const __m512i v = _mm512_loadu_si512(s + c0 / 2);
    const __m512i lo = _mm512_shuffle_epi8(lut, _mm512_and_si512(v, m4));
    const __m512i hi = _mm512_shuffle_epi8(lut, _mm512_and_si512(_mm512_srli_epi16(v, 4), m4));
    store_chunk_i8<G, BF16>(slots_to_blocks(lo), slots_to_blocks(hi), scales, st, c0, dst);
  }
  dequant_tail<G, BF16>(k, scales, st, dst, [&](int h, int p) {
    const uint8_t byte = s[kc / 2 + p];
    return cb[h ? byte >> 4 : byte & 15];
  });
}

// Row-major codes (w), any rows.
template <int G>
void matmul_q4cb_rows(const QuantMatmulArgs& a) {
  const Q4CbCodes cd(a.codebook);
  if (a.n_tokens < kPrefillTokens) return decode_quant<Q4CbCodes, G>(a, cd);
  gemm_quant<Q4CbCodes, G>(a, cd);
}

template <int G>
void matmul_q4cb_avx512_g(const QuantMatmulArgs& a) {
  if (!a.w_il) return matmul_q4cb_rows<G>(a);
  const Q4CbPanel p{Q4CbLevels(a.codebook)};
  if (a.scale_dtype == DType::BF16)
    return matmul_panel<Q4CbPanel, G, DType::BF16>(a, p, matmul_q4cb_rows<G>);
  matmul_panel<Q4CbPanel, G, DType::F16>(a, p, matmul_q4cb_rows<G>);
}

void dequant_rows(const Tensor& w, int64_t r0, int64_t n, void* dst, bool bf16) {
  dequant_rows_with<Q4CbCodes::kChunkBytes>(
      w, r0, n, dst, bf16,
      [&](auto g, auto to_bf16, const uint8_t* c, const uint16_t* s, auto* out) {
        dequant_row<decltype(g)::value, decltype(to_bf16)::value>(c, s, w.scale_dtype, w.codebook,
                                                                  w.cols(), out);
      });
}

void matmul_q4cb_avx512(const QuantMatmulArgs& a) {
  with_group(a.group, [&](auto g) { matmul_q4cb_avx512_g<decltype(g)::value>(a); });
}

}  // namespace

void fill_matmul_q4cb_avx512(KernelTable& k) {
  k.matmul_q4cb = matmul_q4cb_avx512;
  fill_quant_prefill(k);
  k.dequant_q4cb = dequant_rows;
}

}  // namespace hearth::cpu
