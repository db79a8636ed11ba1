// AVX2 pieces shared by the Q8, Q4 and Q4-codebook kernels; include only from *_avx2.cpp and
// *_avxvnni.cpp files (anonymous namespace: no AVX2 code may become the copy a lower-ISA file
// links against).
#pragma once
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "backends/cpu/matmul_quant.h"
#include "backends/cpu/simd_avx2.h"
#include "core/dtype.h"
#include "core/quant_format.h"

namespace hearth::cpu::qk {
namespace {

inline int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}

inline float scale_f32(DType t, uint16_t s) {
  if (t == DType::BF16) {
    const uint32_t u = uint32_t(s) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  return _cvtsh_ss(s);
}

inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// 8 int32 sums of 4 adjacent u8 * s8 products (the AVX2 stand-in for vpdpbusd); each pair sum
// stays below 2^15 because one operand is at most 15 (Q4 nibbles) or 128 (|Q8 code|).
inline __m256i dot_u8s8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// 8 F16 or BF16 scales as f32.
inline __m256 widen_scales8(DType t, __m128i h) {
  return t == DType::BF16 ? _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))
                          : _mm256_cvtph_ps(h);
}

// out[b] = the f32 scale of block b's group, for the nb blocks of one row (per_group blocks per
// group), once per row rather than per (row, token).
inline void block_scales(DType t, const uint16_t* s, int per_group, int64_t nb, float* out) {
  if (per_group == 1) {
    int64_t b = 0;
    for (; b + 8 <= nb; b += 8) {
      const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + b));
      _mm256_storeu_ps(out + b, widen_scales8(t, h));
    }
    for (; b < nb; ++b) out[b] = scale_f32(t, s[b]);
    return;
  }
  for (int64_t g = 0; g < nb / per_group; ++g) {
    const float v = scale_f32(t, s[g]);
    for (int i = 0; i < per_group; ++i) out[g * per_group + i] = v;
  }
}

// P[b] = dx[b] * swb[b] (swb: block_scales) for one (row, token); returns sum_b P[b] * sx[b].
inline float block_products(const float* dx, const float* sx, const float* swb, int64_t nb,
                            float* P) {
  __m256 c = _mm256_setzero_ps();
  int64_t b = 0;
  for (; b + 8 <= nb; b += 8) {
    const __m256 p = _mm256_mul_ps(_mm256_loadu_ps(dx + b), _mm256_loadu_ps(swb + b));
    _mm256_storeu_ps(P + b, p);
    c = _mm256_fmadd_ps(p, _mm256_loadu_ps(sx + b), c);
  }
  float tail = 0.f;
  for (; b < nb; ++b) {
    P[b] = dx[b] * swb[b];
    tail += P[b] * sx[b];
  }
  return hsum8(c) + tail;
}

inline __m256i load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// A Q4 chunk's nibbles as four vectors of bytes, in the order of the activations they meet (32
// bytes each at x, x + 32, x + 64, x + 96): the low nibbles of its two 32-byte halves, then their
// high nibbles.
inline void q4_nibbles(const uint8_t* c, __m256i* n) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i v0 = load256(c), v1 = load256(c + 32);
  n[0] = _mm256_and_si256(v0, m4);
  n[1] = _mm256_and_si256(v1, m4);
  n[2] = _mm256_and_si256(_mm256_srli_epi16(v0, 4), m4);
  n[3] = _mm256_and_si256(_mm256_srli_epi16(v1, 4), m4);
}

// The QuantActFn: as quantize_act_scalar rounds (amax / 127 per block, nearest even; a block with
// a NaN or infinity gets a NaN scale and zero codes), in element order. Block b goes to
// q + 32 b step, d[b step] and sum[b step]: step 1 for one token's row, n for n tokens
// block-interleaved (PanelActs).
inline void quantize_act_blocks_avx2(const float* x, int64_t k, int8_t* q, float* d, int32_t* sum,
                                     int64_t step = 1) {
  const __m256 sign = _mm256_set1_ps(-0.f), big = _mm256_set1_ps(3.4028235e38f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < k / kBlock; ++b) {
    __m256 v[4], amax = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(x + 32 * b + 8 * i);
      const __m256 a = _mm256_andnot_ps(sign, v[i]);
      amax = _mm256_max_ps(amax, a);
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(a, big, _CMP_NLE_UQ));  // NaN or infinite
    }
    const bool finite = _mm256_movemask_ps(bad) == 0;
    const float m = hmax256(amax);
    const __m256 inv = _mm256_set1_ps(finite && m > 0.f ? 127.f / m : 0.f);
    __m256i c[4];
    for (int i = 0; i < 4; ++i)
      c[i] = finite ? _mm256_cvtps_epi32(_mm256_mul_ps(v[i], inv)) : _mm256_setzero_si256();
    // packs work within 128-bit lanes: bytes come out as [c0 0-3, c1 0-3, c2 0-3, c3 0-3 |
    // c0 4-7, ...] in dwords; one dword permute puts them back in element order.
    const __m256i b8 =
        _mm256_packs_epi16(_mm256_packs_epi32(c[0], c[1]), _mm256_packs_epi32(c[2], c[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * b * step),
                        _mm256_permutevar8x32_epi32(b8, order));
    const __m256i s = _mm256_add_epi32(_mm256_add_epi32(c[0], c[1]), _mm256_add_epi32(c[2], c[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
    d[b * step] = finite ? m / 127.f : NAN;
    sum[b * step] = _mm_cvtsi128_si32(s4);
  }
}

// The Dot policies of the kernels written over both (screen_q8_avx2.h, matmul_panel_avx2.h):
// dot(acc, u, s) is acc plus the 8 int32 lane sums of 4 adjacent u8 x s8 products, by maddubs and
// madd (AVX2; the pair sums must stay below 2^15) or by vpdpbusd (AVX-VNNI, only in files built
// for it). A block's sum of up to 8 such products of nibbles (u <= 15, |s| <= 127) goes
// block = begin(init); block = step(block, u, s) ...; end(block, init): vpdpbusd from init on,
// maddubs adding in 16 bits (8 x 2 x 15 x 127 < 2^15) and widening once at the end.
struct DotMaddubs {
  static __m256i dot(__m256i acc, __m256i u, __m256i s) {
    return _mm256_add_epi32(acc, dot_u8s8(u, s));
  }
  static __m256i begin(__m256i) { return _mm256_setzero_si256(); }
  static __m256i step(__m256i block, __m256i u, __m256i s) {
    return _mm256_add_epi16(block, _mm256_maddubs_epi16(u, s));
  }
  static __m256i end(__m256i block, __m256i init) {
    return _mm256_add_epi32(init, _mm256_madd_epi16(block, _mm256_set1_epi16(1)));
  }
};
#ifdef __AVXVNNI__
struct DotVnni {
  static __m256i dot(__m256i acc, __m256i u, __m256i s) {
    return _mm256_dpbusd_avx_epi32(acc, u, s);
  }
  static __m256i begin(__m256i init) { return init; }
  static __m256i step(__m256i block, __m256i u, __m256i s) { return dot(block, u, s); }
  static __m256i end(__m256i block, __m256i) { return block; }
};
#endif

// Decode streams the codes once, row after row; the hardware prefetchers alone left the kernel
// waiting on memory half the time. Prefetching into L2 this far ahead of each 64 bytes read makes
// one linear stream over the matrix, as the AVX-512 kernels do (matmul_quant_avx512.h).
constexpr int64_t kPrefetchAhead = 65536;

// Decode and prefill: token tiles of activations quantized in slot order, each row's group scales
// widened once, then per (row, token) one pass over the chunks, each chunk's 8 lane dots scaled by
// one broadcast of its 4 block factors. Codes provides kChunkBytes (per 128 elements), dot(chunk,
// x) -> the chunk's 8 int32 lane dots (lane i: block i mod 4), kVecOffset (the unsigned offset
// those dots still carry: Q4's +8; 0 where they are exact signed dots), tail(chunk, x, m, isum)
// with kTailOffset, the same for a short last chunk of m blocks (tail_block_dots).
template <class Codes>
void matmul_quant_avx2(const QuantMatmulArgs& a, const Codes& cd) {
  const int64_t k = a.k, nb = k / kBlock, ng = k / a.group, nc = k / kChunk, kc = nc * kChunk;
  const int64_t row_bytes = k * Codes::kChunkBytes / kChunk;
  const int per_group = a.group / int(kBlock);
  ActTile at;
  float* sw = carve_act_tile(a.scratch, k, &at);  // [nb] block scales of the row
  const int64_t nbp = (nb + 15) / 16 * 16;        // a row's block factors, padded
  float* P = sw + nbp;
  const auto* codes = static_cast<const uint8_t*>(a.w);
  const auto* scales = static_cast<const uint16_t*>(a.scales);
  // Row-major codes only (the backend's copies are panels: matmul_panel_avx2.h). With one token
  // tile the previous call's activations are still in the scratch (reuse_x).
  const bool reuse = a.reuse_x && a.n_tokens <= kTokenTile;
  for (int t0 = 0; t0 < a.n_tokens; t0 += kTokenTile) {
    const int nt = int(min64(kTokenTile, a.n_tokens - t0));
    for (int t = 0; t < nt && !reuse; ++t)
      quantize_act_scalar(a.x + (t0 + t) * a.ldx, k, at.q + t * k, at.d + t * nb, at.s + t * nb);
    for (int64_t r = a.r0; r < a.r1; ++r) {
      const uint8_t* w = codes + r * row_bytes;
      block_scales(a.scale_dtype, scales + r * ng, per_group, nb, sw);
      for (int t = 0; t < nt; ++t) {
        const int8_t* xq = at.q + t * k;
        const float* sx = at.s + t * nb;
        const float corr = block_products(at.d + t * nb, sx, sw, nb, P);
        __m256 acc = _mm256_setzero_ps();
        for (int64_t j = 0; j < nc; ++j) {
          const uint8_t* c = w + j * Codes::kChunkBytes;
          if (t == 0)
            for (int64_t l = 0; l < Codes::kChunkBytes; l += 64)
              _mm_prefetch(reinterpret_cast<const char*>(c + l + kPrefetchAhead), _MM_HINT_T1);
          const __m256i s = cd.dot(c, xq + j * kChunk);
          const __m256 f = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(P + 4 * j));
          acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), f, acc);
        }
        float dot = hsum8(acc);
        if (kc < k) {  // a shorter last chunk, whose offset differs from the vector part's
          const int m = int((k - kc) / kBlock);
          int32_t isum[4];
          cd.tail(w + nc * Codes::kChunkBytes, xq + kc, m, isum);
          constexpr float kExtra = float(Codes::kTailOffset - Codes::kVecOffset);
          for (int b = 0; b < m; ++b)
            dot += P[kc / kBlock + b] * (float(isum[b]) - kExtra * sx[kc / kBlock + b]);
        }
        a.y[(t0 + t) * a.ldy + (r - a.r0)] = dot - float(Codes::kVecOffset) * corr;
      }
    }
  }
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

// The QuantDequantFn body for Q8, Q4 and Q4-codebook rows: half(codes_row, c0, h, &n0, &n1) gives
// the signed int8 values of half h of the full chunk at element c0, slot lanes 0-7 in n0 and 8-15
// in n1 (quant/FORMAT.md); each block's dwords go back to element order with one dword permute
// and a 64-bit unpack, then are scaled by the block's group scale. A short last chunk takes the
// portable path.
template <class Half>
void dequant_rows_avx2(const Tensor& w, int64_t r0, int64_t n, void* dst, bool bf16, Half half) {
  const int64_t k = w.cols(), kc = k / kChunk * kChunk, g = w.group_size;
  const int64_t row_bytes = w.dtype == DType::Q8 ? k : k / 2;
  const auto* codes = static_cast<const uint8_t*>(w.data);
  const auto* scales = static_cast<const uint16_t*>(w.scales);
  const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t r = r0; r < r0 + n; ++r) {
    const uint8_t* c = codes + r * row_bytes;
    const uint16_t* sc = scales + r * (k / g);
    const int64_t e0 = (r - r0) * k;  // this row's first element in dst
    for (int64_t c0 = 0; c0 < kc; c0 += kChunk) {
      for (int h = 0; h < 2; ++h) {
        __m256i n0, n1;
        half(c, c0, h, &n0, &n1);
        // Lane 4q + b holds quarter q of block b: [L0 L4 L1 L5 ..] and [L8 L12 L9 L13 ..], then
        // 64-bit unpacks gather blocks 0 and 2 (lo) and 1 and 3 (hi), 16 bytes each, in order.
        const __m256i p0 = _mm256_permutevar8x32_epi32(n0, perm);
        const __m256i p1 = _mm256_permutevar8x32_epi32(n1, perm);
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
}  // namespace hearth::cpu::qk
