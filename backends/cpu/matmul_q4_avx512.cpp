// Q4 matmul, AVX-512 VNNI + BF16. Each row is 128-element chunks of 64 bytes, byte j holding
// elements j (low nibble) and j + 64 (high nibble) as q + 8 (quant/FORMAT.md), so one 64-byte load
// yields elements 0-63 and 64-127 of a chunk in order. Decode multiplies the unsigned nibbles with
// int8 activations on vpdpbusd and removes the +8 per block afterwards; prefill dequantizes tiles
// of rows to bf16 and runs vdpbf16ps.
#include <type_traits>

#include "backends/cpu/matmul_quant_avx512.h"

namespace hearth::cpu {

namespace {

using namespace qk;

constexpr int64_t kChunk = 128;

inline __m128i lane128(__m512i v, int i) {
  switch (i) {
    case 0: return _mm512_castsi512_si128(v);
    case 1: return _mm512_castsi512_si128(_mm512_shuffle_i32x4(v, v, 1));
    case 2: return _mm512_castsi512_si128(_mm512_shuffle_i32x4(v, v, 2));
    default: return _mm512_castsi512_si128(_mm512_shuffle_i32x4(v, v, 3));
  }
}

// Unsigned codes (q + 8) of elements [c0, c0 + n) of a row whose last chunk starts at c0 and has
// n < 128 elements; the integer dot with the activation codes goes per block into isum.
inline void tail_dots(const uint8_t* row, const int8_t* xq, int64_t c0, int64_t n, int32_t* isum) {
  const int64_t half = n / 2;
  const uint8_t* s = row + c0 / 2;
  for (int64_t b = 0; b < n / kBlock; ++b) isum[b] = 0;
  for (int64_t j = 0; j < half; ++j) {
    isum[j / kBlock] += int32_t(s[j] & 15) * xq[c0 + j];
    isum[(j + half) / kBlock] += int32_t(s[j] >> 4) * xq[c0 + j + half];
  }
}

// sum over the full chunks of P[block] * dot(nibbles, xq) for NR rows.
template <int NR>
inline void rows_dot(const uint8_t* const* w, const float* const* P, const int8_t* xq, int64_t kc,
                     float* out) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i zero = _mm512_setzero_si512();
  __m512 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t c0 = 0; c0 < kc; c0 += 4 * kChunk) {  // 16 blocks share one load of P
    const int nch = int(min64(4, (kc - c0) / kChunk));
    __m512 pv[NR];
    for (int r = 0; r < NR; ++r)
      pv[r] = _mm512_maskz_loadu_ps(first_n(4 * nch), P[r] + c0 / kBlock);
    for (int m = 0; m < nch; ++m) {
      const int64_t e = c0 + m * kChunk;
      const __m512i xlo = _mm512_loadu_si512(xq + e), xhi = _mm512_loadu_si512(xq + e + 64);
      const __m512i ilo = pair_index(4 * m), ihi = pair_index(4 * m + 2);
      for (int r = 0; r < NR; ++r) {
        const __m512i v = _mm512_loadu_si512(w[r] + e / 2);
        const __m512i lo = _mm512_and_si512(v, m4);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
        const __m512i alo = _mm512_dpbusd_epi32(zero, lo, xlo);
        const __m512i ahi = _mm512_dpbusd_epi32(zero, hi, xhi);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(alo), _mm512_permutexvar_ps(ilo, pv[r]), acc[r]);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(ahi), _mm512_permutexvar_ps(ihi, pv[r]), acc[r]);
      }
    }
  }
  for (int r = 0; r < NR; ++r) out[r] = hsum(acc[r]);
}

template <int G>
void decode(const QuantMatmulArgs& a) {
  const int64_t k = a.k, nb = k / kBlock, ng = k / G, kc = k / kChunk * kChunk;
  const int64_t row_bytes = k / 2;
  ActTile at;
  float* rest = carve_act_tile(a.scratch, k, &at);
  float* sw = rest;                              // [4][ng]
  float* P = sw + 4 * ((ng + 15) / 16 * 16);     // [4][nb]
  auto* isum = reinterpret_cast<int32_t*>(P + 4 * ((nb + 15) / 16 * 16));  // [4] tail blocks
  const auto* codes = static_cast<const uint8_t*>(a.w);
  const auto* scales = static_cast<const uint16_t*>(a.scales);
  const int n_tok = a.n_tokens;
  for (int t = 0; t < n_tok; ++t)
    quantize_act_avx512(a.x + t * a.ldx, k, at.q + t * k, at.d + t * nb, at.s + t * nb);

  auto run = [&](auto nr_tag, int64_t r) {
    constexpr int NR = decltype(nr_tag)::value;
    const uint8_t* w[NR];
    const float* pr[NR];
    for (int i = 0; i < NR; ++i) {
      w[i] = codes + (r + i) * row_bytes;
      pr[i] = P + i * ((nb + 15) / 16 * 16);
      scales_to_f32_avx512(a.scale_dtype, scales + (r + i) * ng, ng, sw + i * ((ng + 15) / 16 * 16));
    }
    for (int t = 0; t < n_tok; ++t) {
      const int8_t* xq = at.q + t * k;
      float corr[NR], dot[NR];
      for (int i = 0; i < NR; ++i)
        corr[i] = block_products<G>(at.d + t * nb, at.s + t * nb, sw + i * ((ng + 15) / 16 * 16),
                                    nb, P + i * ((nb + 15) / 16 * 16));
      rows_dot<NR>(w, pr, xq, kc, dot);
      for (int i = 0; i < NR; ++i) {
        if (kc < k) {
          tail_dots(w[i], xq, kc, k - kc, isum);
          for (int64_t b = 0; b < (k - kc) / kBlock; ++b)
            dot[i] += pr[i][kc / kBlock + b] * float(isum[b]);
        }
        a.y[t * a.ldy + (r - a.r0) + i] = dot[i] - 8.f * corr[i];
      }
    }
  };
  int64_t r = a.r0;
  for (; r + 4 <= a.r1; r += 4) run(std::integral_constant<int, 4>(), r);
  for (; r < a.r1; ++r) run(std::integral_constant<int, 1>(), r);
}

// One row to bf16: nibble - 8 times its group's scale.
template <int G>
void dequant_row_bf16(const QuantMatmulArgs& a, int64_t row, uint16_t* dst, float* sw) {
  const int64_t k = a.k, ng = k / G, kc = k / kChunk * kChunk;
  const auto* s = static_cast<const uint8_t*>(a.w) + row * (k / 2);
  scales_to_f32_avx512(a.scale_dtype, static_cast<const uint16_t*>(a.scales) + row * ng, ng, sw);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i eight = _mm512_set1_epi32(8);
  for (int64_t c0 = 0; c0 < kc; c0 += kChunk) {
    const __m512i v = _mm512_loadu_si512(s + c0 / 2);
    const __m512i nib[2] = {_mm512_and_si512(v, m4), _mm512_and_si512(_mm512_srli_epi16(v, 4), m4)};
    for (int h = 0; h < 2; ++h)
      for (int p = 0; p < 2; ++p) {  // 32 elements: c0 + 64h + 32p
        const int64_t e = c0 + 64 * h + 32 * p;
        const __m512 sc = _mm512_set1_ps(sw[e / G]);
        const __m128i b0 = lane128(nib[h], 2 * p), b1 = lane128(nib[h], 2 * p + 1);
        const __m512 f0 = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(b0), eight));
        const __m512 f1 = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(b1), eight));
        store_bf16x32(dst + e, _mm512_mul_ps(f0, sc), _mm512_mul_ps(f1, sc));
      }
  }
  if (kc < k) {
    const int64_t n = k - kc, half = n / 2;
    for (int64_t j = 0; j < half; ++j) {
      const uint8_t b = s[kc / 2 + j];
      dst[kc + j] = to_bf16_bits(float((b & 15) - 8) * sw[(kc + j) / G]);
      dst[kc + j + half] = to_bf16_bits(float((b >> 4) - 8) * sw[(kc + j + half) / G]);
    }
  }
}

template <int G>
void matmul_q4_avx512_g(const QuantMatmulArgs& a) {
  if (a.n_tokens < kPrefillTokens) return decode<G>(a);
  // Row scales go after the two bf16 tiles.
  float* sw = a.scratch + (kTokenTile + kRowTile) * a.k / 2;
  matmul_tiles_bf16(a, [&](int64_t row, uint16_t* dst) { dequant_row_bf16<G>(a, row, dst, sw); });
}

void matmul_q4_avx512(const QuantMatmulArgs& a) {
  switch (a.group) {
    case 32: return matmul_q4_avx512_g<32>(a);
    case 64: return matmul_q4_avx512_g<64>(a);
    default: return matmul_q4_avx512_g<128>(a);
  }
}

}  // namespace

void fill_matmul_q4_avx512(KernelTable& k) { k.matmul_q4 = matmul_q4_avx512; }

}  // namespace hearth::cpu
