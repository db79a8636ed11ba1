// Q4-codebook matmul, AVX2: Q4's 128-element chunks of 64 bytes in slot order (quant/FORMAT.md),
// low nibbles the chunk's first half and high nibbles its second, 4-byte lane i in block i mod 4,
// each nibble an index into the 16 int8 levels. vpshufb turns a nibble plane into levels; maddubs
// multiplies |level| with the int8 activations (same slot order) carrying the level's sign, as the
// Q8 kernel does, so lanes hold exact signed dots; one broadcast of the chunk's 4 block factors
// scales them. Dequantization (GEMM prefill blocks) looks levels up the same way and puts each
// block's dwords back in element order with one dword permute and a 64-bit unpack.
#include "backends/cpu/matmul_quant_avx2.h"
#include "quant/format.h"

namespace hearth::cpu {

namespace {

using namespace qk;

struct Q4CbCodes {
  static constexpr int64_t kChunkBytes = 64;
  // The vector dots are exact signed ones; the tail's use level + 128.
  static constexpr int kVecOffset = 0, kTailOffset = 128;
  __m256i lut;
  uint8_t lut_u[16];  // levels + 128, for the short last chunk
  explicit Q4CbCodes(const int8_t* codebook) {
    lut = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codebook)));
    for (int i = 0; i < 16; ++i) lut_u[i] = uint8_t(codebook[i] + 128);
  }
  // Lane dots of 32 nibbles (as levels) with 32 activations; |level|, |x| <= 127 keep maddubs's
  // pair sums below 2^15.
  __m256i dot32(__m256i nib, const int8_t* x) const {
    const __m256i lv = _mm256_shuffle_epi8(lut, nib);
    return dot_u8s8(_mm256_abs_epi8(lv), _mm256_sign_epi8(load256(x), lv));
  }
  __m256i dot(const uint8_t* c, const int8_t* x) const {
    const __m256i m4 = _mm256_set1_epi8(0x0F);
    const __m256i v0 = load256(c), v1 = load256(c + 32);
    const __m256i lo0 = _mm256_and_si256(v0, m4), lo1 = _mm256_and_si256(v1, m4);
    const __m256i hi0 = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4);
    const __m256i hi1 = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4);
    return _mm256_add_epi32(_mm256_add_epi32(dot32(lo0, x), dot32(lo1, x + 32)),
                            _mm256_add_epi32(dot32(hi0, x + 64), dot32(hi1, x + 96)));
  }
  void tail(const uint8_t* c, const int8_t* x, int m, int32_t* isum) const {
    tail_block_dots_lut(c, x, m, lut_u, isum);
  }
};

void matmul_q4cb_avx2(const QuantMatmulArgs& a) {
  matmul_quant_avx2(a, Q4CbCodes(a.codebook));
}

// 16 floats to dst at element e, as f32 or as bf16 (round to nearest even; the values are finite).
inline void store16(void* dst, int64_t e, __m256 a, __m256 b, bool bf16) {
  if (!bf16) {
    _mm256_storeu_ps(static_cast<float*>(dst) + e, a);
    _mm256_storeu_ps(static_cast<float*>(dst) + e + 8, b);
    return;
  }
  auto round = [](__m256 f) {
    const __m256i u = _mm256_castps_si256(f);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    return _mm256_srli_epi32(_mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb)),
                             16);
  };
  // packus works within 128-bit lanes: [a0-3, b0-3, a4-7, b4-7] -> reorder the 64-bit quarters.
  const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(round(a), round(b)), 0xD8);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(static_cast<uint16_t*>(dst) + e), p);
}

void dequant_rows(const Tensor& w, int64_t r0, int64_t n, void* dst, bool bf16) {
  const int64_t k = w.cols(), kc = k / kChunk * kChunk, g = w.group_size;
  const auto* codes = static_cast<const uint8_t*>(w.data);
  const auto* scales = static_cast<const uint16_t*>(w.scales);
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i lut =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.codebook)));
  const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t r = r0; r < r0 + n; ++r) {
    const uint8_t* c = codes + r * (k / 2);
    const uint16_t* sc = scales + r * (k / g);
    const int64_t e0 = (r - r0) * k;  // this row's first element in dst
    for (int64_t c0 = 0; c0 < kc; c0 += kChunk) {
      const __m256i v0 = load256(c + c0 / 2), v1 = load256(c + c0 / 2 + 32);  // lanes 0-7, 8-15
      for (int h = 0; h < 2; ++h) {
        const __m256i n0 =
            h ? _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4) : _mm256_and_si256(v0, m4);
        const __m256i n1 =
            h ? _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4) : _mm256_and_si256(v1, m4);
        // Lane 4q + b holds quarter q of block b: [L0 L4 L1 L5 ..] and [L8 L12 L9 L13 ..], then
        // 64-bit unpacks gather blocks 0 and 2 (lo) and 1 and 3 (hi), 16 bytes each, in order.
        const __m256i p0 = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(lut, n0), perm);
        const __m256i p1 = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(lut, n1), perm);
        const __m256i lo = _mm256_unpacklo_epi64(p0, p1), hi = _mm256_unpackhi_epi64(p0, p1);
        const __m128i blk[4] = {_mm256_castsi256_si128(lo), _mm256_castsi256_si128(hi),
                                _mm256_extracti128_si256(lo, 1), _mm256_extracti128_si256(hi, 1)};
        for (int b = 0; b < 4; ++b) {
          const __m256 d = _mm256_set1_ps(scale_f32(w.scale_dtype, sc[(c0 + 32 * b) / g]));
          const __m256 f0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(blk[b]));
          const __m256 f1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(blk[b], 8)));
          store16(dst, e0 + c0 + 32 * b + 16 * h, _mm256_mul_ps(f0, d), _mm256_mul_ps(f1, d), bf16);
        }
      }
    }
    if (kc < k) {  // a shorter last chunk: the portable path
      float tmp[kChunk];
      quant::dequantize_row(w, r, tmp, kc, k);
      for (int64_t i = kc; i < k; ++i) {
        if (bf16)
          static_cast<uint16_t*>(dst)[e0 + i] = f32_to_bf16(tmp[i - kc]);
        else
          static_cast<float*>(dst)[e0 + i] = tmp[i - kc];
      }
    }
  }
}

}  // namespace

void fill_matmul_q4cb_avx2(KernelTable& k) {
  k.matmul_q4cb = matmul_q4cb_avx2;
  k.dequant_q4cb = dequant_rows;
}

}  // namespace hearth::cpu
