// Q8 matmul, AVX-512 VNNI + BF16. Codes are int8 row-major [rows, k] (quant/FORMAT.md). Decode
// flips each code's sign bit to get q + 128 as the unsigned operand of vpdpbusd against int8
// activations and removes the +128 per block afterwards; prefill dequantizes tiles of rows to
// bf16 and runs vdpbf16ps.
#include <type_traits>

#include "backends/cpu/matmul_quant_avx512.h"

namespace hearth::cpu {

namespace {

using namespace qk;

constexpr int64_t kStep = 64;

template <int NR>
inline void rows_dot(const int8_t* const* w, const float* const* P, const int8_t* xq, int64_t kc,
                     float* out) {
  const __m512i flip = _mm512_set1_epi8(char(0x80));
  const __m512i zero = _mm512_setzero_si512();
  __m512 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t c0 = 0; c0 < kc; c0 += 8 * kStep) {  // 16 blocks share one load of P
    const int nst = int(min64(8, (kc - c0) / kStep));
    __m512 pv[NR];
    for (int r = 0; r < NR; ++r)
      pv[r] = _mm512_maskz_loadu_ps(first_n(2 * nst), P[r] + c0 / kBlock);
    for (int m = 0; m < nst; ++m) {
      const int64_t e = c0 + m * kStep;
      const __m512i xv = _mm512_loadu_si512(xq + e);
      const __m512i idx = pair_index(2 * m);
      for (int r = 0; r < NR; ++r) {
        const __m512i u = _mm512_xor_si512(_mm512_loadu_si512(w[r] + e), flip);
        const __m512i d = _mm512_dpbusd_epi32(zero, u, xv);
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_permutexvar_ps(idx, pv[r]), acc[r]);
      }
    }
  }
  for (int r = 0; r < NR; ++r) out[r] = hsum(acc[r]);
}

template <int G>
void decode(const QuantMatmulArgs& a) {
  const int64_t k = a.k, nb = k / kBlock, ng = k / G, kc = k / kStep * kStep;
  const int64_t ngp = (ng + 15) / 16 * 16, nbp = (nb + 15) / 16 * 16;
  ActTile at;
  float* rest = carve_act_tile(a.scratch, k, &at);
  float* sw = rest;        // [4][ngp]
  float* P = sw + 4 * ngp;  // [4][nbp]
  const auto* codes = static_cast<const int8_t*>(a.w);
  const auto* scales = static_cast<const uint16_t*>(a.scales);
  const int n_tok = a.n_tokens;
  for (int t = 0; t < n_tok; ++t)
    quantize_act_avx512(a.x + t * a.ldx, k, at.q + t * k, at.d + t * nb, at.s + t * nb);

  auto run = [&](auto nr_tag, int64_t r) {
    constexpr int NR = decltype(nr_tag)::value;
    const int8_t* w[NR];
    const float* pr[NR];
    for (int i = 0; i < NR; ++i) {
      w[i] = codes + (r + i) * k;
      pr[i] = P + i * nbp;
      scales_to_f32_avx512(a.scale_dtype, scales + (r + i) * ng, ng, sw + i * ngp);
    }
    for (int t = 0; t < n_tok; ++t) {
      const int8_t* xq = at.q + t * k;
      float corr[NR], dot[NR];
      for (int i = 0; i < NR; ++i)
        corr[i] = block_products<G>(at.d + t * nb, at.s + t * nb, sw + i * ngp, nb, P + i * nbp);
      rows_dot<NR>(w, pr, xq, kc, dot);
      for (int i = 0; i < NR; ++i) {
        if (kc < k) {  // one last block of 32: same +128 form as the vector part
          int32_t s = 0;
          for (int64_t j = kc; j < k; ++j) s += (int32_t(w[i][j]) + 128) * xq[j];
          dot[i] += pr[i][kc / kBlock] * float(s);
        }
        a.y[t * a.ldy + (r - a.r0) + i] = dot[i] - 128.f * corr[i];
      }
    }
  };
  int64_t r = a.r0;
  for (; r + 4 <= a.r1; r += 4) run(std::integral_constant<int, 4>(), r);
  for (; r < a.r1; ++r) run(std::integral_constant<int, 1>(), r);
}

template <int G>
void dequant_row_bf16(const QuantMatmulArgs& a, int64_t row, uint16_t* dst, float* sw) {
  const int64_t k = a.k, ng = k / G;
  const auto* c = static_cast<const int8_t*>(a.w) + row * k;
  scales_to_f32_avx512(a.scale_dtype, static_cast<const uint16_t*>(a.scales) + row * ng, ng, sw);
  for (int64_t e = 0; e < k; e += 32) {
    const __m512 sc = _mm512_set1_ps(sw[e / G]);
    const __m512 f0 = _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c + e))));
    const __m512 f1 = _mm512_cvtepi32_ps(
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c + e + 16))));
    store_bf16x32(dst + e, _mm512_mul_ps(f0, sc), _mm512_mul_ps(f1, sc));
  }
}

template <int G>
void matmul_q8_avx512_g(const QuantMatmulArgs& a) {
  if (a.n_tokens < kPrefillTokens) return decode<G>(a);
  float* sw = a.scratch + (kTokenTile + kRowTile) * a.k / 2;
  matmul_tiles_bf16(a, [&](int64_t row, uint16_t* dst) { dequant_row_bf16<G>(a, row, dst, sw); });
}

void matmul_q8_avx512(const QuantMatmulArgs& a) {
  switch (a.group) {
    case 32: return matmul_q8_avx512_g<32>(a);
    case 64: return matmul_q8_avx512_g<64>(a);
    default: return matmul_q8_avx512_g<128>(a);
  }
}

}  // namespace

void fill_matmul_q8_avx512(KernelTable& k) { k.matmul_q8 = matmul_q8_avx512; }

}  // namespace hearth::cpu
