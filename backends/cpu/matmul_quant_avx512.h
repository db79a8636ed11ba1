// AVX-512 pieces shared by matmul_q8_avx512.cpp and matmul_q4_avx512.cpp; include only from
// *_avx512.cpp files. Everything is in an anonymous namespace so no AVX-512 code can become the
// copy of an inline function that a lower-ISA file calls.
#pragma once
#include <immintrin.h>

// GCC 12's AVX-512 intrinsics build "undefined" vectors by self-initialisation, which
// -Wuninitialized reports at our call sites; the lanes in question are never read.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

#include <cstring>
#include <type_traits>

#include "backends/cpu/matmul_quant.h"
#include "backends/cpu/quant_dispatch.h"

namespace hearth::cpu::qk {
namespace {

inline int64_t min64(int64_t a, int64_t b) {
  return a < b ? a : b;
}
inline __mmask16 first_n(int64_t n) {
  return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1);
}

// Decode streams each weight row once; the rows of a block are short streams that restart every
// block, which hardware prefetchers follow poorly. Prefetching ahead of every 64 bytes read makes
// one linear stream over the matrix instead. 64 KiB ahead, best of 4-128 KiB on the first host
// (Q8 ~9.5 -> ~12 GB/s on one thread). Into L1, as the BF16 kernels do: on Zen 5 the L1 hint beat
// the L2 one by 3-5% of INT4 and INT8 decode on one thread (74-75 -> 78 t/s, 51 -> 53), and tied on
// two. Prefetches past the end cannot fault.
constexpr int64_t kPrefetchAhead = 65536;
inline void prefetch(const void* p) {
  _mm_prefetch(static_cast<const char*>(p), _MM_HINT_T0);
}

// Horizontal reductions.
inline __m128 fold_to_128(__m512 v, __m512 (*op)(__m512, __m512)) {
  v = op(v, _mm512_shuffle_f32x4(v, v, 0x4E));
  v = op(v, _mm512_shuffle_f32x4(v, v, 0xB1));
  return _mm512_castps512_ps128(v);
}
inline __m512 add_ps(__m512 a, __m512 b) {
  return _mm512_add_ps(a, b);
}
inline __m512 max_ps(__m512 a, __m512 b) {
  return _mm512_max_ps(a, b);
}
inline float hsum(__m512 v) {
  __m128 x = fold_to_128(v, add_ps);
  x = _mm_add_ps(x, _mm_movehl_ps(x, x));
  return _mm_cvtss_f32(_mm_add_ss(x, _mm_shuffle_ps(x, x, 1)));
}
inline float hmax(__m512 v) {
  __m128 x = fold_to_128(v, max_ps);
  x = _mm_max_ps(x, _mm_movehl_ps(x, x));
  return _mm_cvtss_f32(_mm_max_ss(x, _mm_shuffle_ps(x, x, 1)));
}

// A short last chunk (m < 4 blocks: tail_block_dots' contract) in one pass: 4-byte lane i of
// either half's 16 m bytes belongs to block i mod m. Below 128 columns (the tiny fixtures) every
// row is such a chunk, and the scalar loop made the LM head's screen slower than the head.
inline void tail_lanes_to_blocks(__m512i lanes, int m, int32_t* isum) {
  // Lanes from 4 m on are zero (masked loads), so each block's mask may take them too.
  static constexpr __mmask16 kLanes[4][3] = {
      {}, {0xFFFF}, {0x5555, 0xAAAA}, {0x9249, 0x2492, 0x4924}};
  for (int b = 0; b < m; ++b) isum[b] = _mm512_mask_reduce_add_epi32(kLanes[m][b], lanes);
}
inline __mmask64 tail_mask(int m) {
  return _cvtu64_mask64((uint64_t(1) << (16 * m)) - 1);
}
// The unsigned operands u0 (against the first half's activations) and u1 (the second's).
inline void tail_dots(__m512i u0, __m512i u1, const int8_t* x, int m, int32_t* isum) {
  const __mmask64 n = tail_mask(m);
  const __m512i x0 = _mm512_maskz_loadu_epi8(n, x), x1 = _mm512_maskz_loadu_epi8(n, x + 16 * m);
  const __m512i z = _mm512_setzero_si512();
  tail_lanes_to_blocks(_mm512_dpbusd_epi32(_mm512_dpbusd_epi32(z, u0, x0), u1, x1), m, isum);
}
// Q8 codes with their sign bits flipped (q + 128), both halves' bytes.
inline void tail_dots_q8(const uint8_t* c, const int8_t* x, int m, int32_t* isum) {
  const __mmask64 n = tail_mask(m);
  const __m512i flip = _mm512_set1_epi8(char(0x80));
  tail_dots(_mm512_xor_si512(_mm512_maskz_loadu_epi8(n, c), flip),
            _mm512_xor_si512(_mm512_maskz_loadu_epi8(n, c + 16 * m), flip), x, m, isum);
}
// Q4 codes: byte p's low nibble against the first half's activations, its high one the second's.
inline void tail_dots_q4(const uint8_t* c, const int8_t* x, int m, int32_t* isum) {
  const __m512i nib = _mm512_set1_epi8(0x0F);
  const __m512i w = _mm512_maskz_loadu_epi8(tail_mask(m), c);
  tail_dots(_mm512_and_si512(w, nib), _mm512_and_si512(_mm512_srli_epi16(w, 4), nib), x, m, isum);
}

// Same codes as quantize_act_scalar (x * (127 / amax) rounded to nearest even, the MXCSR default),
// moved into slot order: slot lane 4q + b of half h holds natural dword 8b + 4h + q.
inline void quantize_act_avx512(const float* x, int64_t k, int8_t* q, float* d, float* s) {
  alignas(64) int8_t nat[kChunk];
  const __m512i to_a = _mm512_set_epi32(27, 19, 11, 3, 26, 18, 10, 2, 25, 17, 9, 1, 24, 16, 8, 0);
  const __m512i to_b = _mm512_add_epi32(to_a, _mm512_set1_epi32(4));
  for (int64_t c0 = 0; c0 < k; c0 += kChunk) {
    const int m = int(min64(kChunk, k - c0) / kBlock);
    for (int b = 0; b < m; ++b) {
      const float* xb = x + c0 + 32 * b;
      const __m512 v0 = _mm512_loadu_ps(xb), v1 = _mm512_loadu_ps(xb + 16);
      const float amax = hmax(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
      const __m512 inv = _mm512_set1_ps(amax > 0.f ? 127.f / amax : 0.f);
      const __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, inv));
      const __m512i i1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, inv));
      _mm_store_si128(reinterpret_cast<__m128i*>(nat + 32 * b),
                      _mm512_maskz_cvtepi32_epi8(0xFFFF, i0));
      _mm_store_si128(reinterpret_cast<__m128i*>(nat + 32 * b + 16),
                      _mm512_maskz_cvtepi32_epi8(0xFFFF, i1));
      d[(c0 + 32 * b) / kBlock] = amax / 127.f;
      // Exact: at most 32 * 127 in magnitude.
      s[(c0 + 32 * b) / kBlock] = hsum(_mm512_cvtepi32_ps(_mm512_add_epi32(i0, i1)));
    }
    if (m == 4) {
      const __m512i n0 = _mm512_load_si512(nat), n1 = _mm512_load_si512(nat + 64);
      _mm512_storeu_si512(q + c0, _mm512_permutex2var_epi32(n0, to_a, n1));
      _mm512_storeu_si512(q + c0 + 64, _mm512_permutex2var_epi32(n0, to_b, n1));
      continue;
    }
    for (int b = 0; b < m; ++b)
      for (int h = 0; h < 2; ++h)
        for (int qq = 0; qq < 4; ++qq)
          for (int e = 0; e < 4; ++e)
            q[c0 + 16 * m * h + 4 * (m * qq + b) + e] = nat[32 * b + 16 * h + 4 * qq + e];
  }
}

// Slot order back to element order for one 64-byte half-chunk: afterwards bytes 16b .. 16b + 15
// hold block b's 16 elements of that half, in order.
inline __m512i slots_to_blocks(__m512i v) {
  return _mm512_permutexvar_epi32(
      _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0), v);
}

inline __m128i lane128(__m512i v, int i) {
  switch (i) {
    case 0:
      return _mm512_castsi512_si128(v);
    case 1:
      return _mm512_castsi512_si128(_mm512_shuffle_i32x4(v, v, 1));
    case 2:
      return _mm512_castsi512_si128(_mm512_shuffle_i32x4(v, v, 2));
    default:
      return _mm512_castsi512_si128(_mm512_shuffle_i32x4(v, v, 3));
  }
}

inline __m512 widen_scales16(DType t, __m256i h) {
  return t == DType::BF16 ? _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))
                          : _mm512_cvtph_ps(h);
}

// n F16/BF16 scales -> f32.
inline void scales_to_f32_avx512(DType t, const uint16_t* s, int64_t n, float* out) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = first_n(n - i);
    _mm512_mask_storeu_ps(out + i, m, widen_scales16(t, _mm256_maskz_loadu_epi16(m, s + i)));
  }
}

// The weight scales of chunk j's 4 blocks as f32, lane i holding block i mod 4's, read straight
// from the row's F16/BF16 scales: 8, 4 or 2 bytes broadcast and widened. A per-row table of
// factors (activation scale x weight scale) written first and broadcast from in the loop measured
// slower on Zen 5, from L2 and from memory, even with every store done before the first load.
template <int G, DType ST>
inline __m512 chunk_scales(const uint16_t* sw, int64_t j) {
  __m256i h;
  if constexpr (G == 32) {
    int64_t v;
    std::memcpy(&v, sw + 4 * j, 8);
    h = _mm256_set1_epi64x(v);
  } else if constexpr (G == 64) {
    // Scales s0 s1 of the chunk's two groups, as s0 s0 s1 s1 per 64 bits.
    int32_t v;
    std::memcpy(&v, sw + 2 * j, 4);
    h = _mm256_shufflelo_epi16(_mm256_set1_epi32(v), 0x50);
    h = _mm256_unpacklo_epi64(h, h);
  } else {
    h = _mm256_set1_epi16(int16_t(sw[j]));
  }
  return widen_scales16(ST, h);
}

// The codes are stored as unsigned values (Q4: q + 8, Q8: q + 128) for vpdpbusd; the offset's share
// of each lane of a chunk dot is offset x (the sum of the 8 activation codes that lane covers), the
// same for every row. Computed once per token as int32 lanes that start each row's accumulation,
// so the integer dot comes out exact and signed and no row needs a correction term.
inline void offset_lanes(const int8_t* xq, int64_t nc, int offset_log2, int32_t* out) {
  const __m512i ones = _mm512_set1_epi8(1);
  for (int64_t j = 0; j < nc; ++j) {
    const __m512i xa = _mm512_loadu_si512(xq + j * kChunk);
    const __m512i xb = _mm512_loadu_si512(xq + j * kChunk + 64);
    const __m512i sum =
        _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, xa), ones, xb);
    _mm512_storeu_si512(out + 16 * j, _mm512_sub_epi32(_mm512_setzero_si512(),
                                                       _mm512_slli_epi32(sum, offset_log2)));
  }
}

// The totals of four accumulators, in one vector (a per-row hsum costs twice the shuffles).
inline __m128 hsum4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
  const __m512 s01 = _mm512_add_ps(_mm512_unpacklo_ps(a0, a1), _mm512_unpackhi_ps(a0, a1));
  const __m512 s23 = _mm512_add_ps(_mm512_unpacklo_ps(a2, a3), _mm512_unpackhi_ps(a2, a3));
  // Each 128-bit lane now holds {a0, a1, a2, a3} partial sums.
  __m512 t = _mm512_add_ps(_mm512_shuffle_ps(s01, s23, 0x44), _mm512_shuffle_ps(s01, s23, 0xEE));
  t = _mm512_add_ps(t, _mm512_shuffle_f32x4(t, t, 0x4E));
  t = _mm512_add_ps(t, _mm512_shuffle_f32x4(t, t, 0xB1));
  return _mm512_castps512_ps128(t);
}

// Decode for Q4, Q8 and codebook Q4 (a Codes struct each): activations quantized per token,
// offsets folded into the integer accumulators, then NR rows at a time share each activation
// chunk. Codes provides kOffsetLog2, kChunkBytes, kDecodeRows (rows per pass), dot(chunk, xa,
// xb, init) = init + the chunk's lane dots, and tail(codes, x, m, isum), the unsigned block dots
// of a short last chunk (tail_block_dots); dot and tail may be members of a Codes object (a
// codebook's lookup table), passed to decode_quant. Each chunk's integer lanes are scaled by the
// activations' 4 block scales (loaded once for all rows) times the row's 4 weight scales.
template <class Codes, int G, DType ST, int NR>
inline void rows_dot(const Codes& cd, const uint8_t* const* w, const uint16_t* const* sw,
                     int64_t ng, const int8_t* xq, const float* xd, const int32_t* off, int64_t nc,
                     float* out) {
  __m512 acc[NR];
  for (int r = 0; r < NR; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t j = 0; j < nc; ++j) {
    const __m512i xa = _mm512_loadu_si512(xq + j * kChunk);
    const __m512i xb = _mm512_loadu_si512(xq + j * kChunk + 64);
    const __m512i o = _mm512_loadu_si512(off + 16 * j);
    const __m512 dx = _mm512_broadcast_f32x4(_mm_loadu_ps(xd + 4 * j));
    for (int r = 0; r < NR; ++r) {
      const __m512i d = cd.dot(w[r] + j * Codes::kChunkBytes, xa, xb, o);
      const __m512 f = _mm512_mul_ps(chunk_scales<G, ST>(sw[r], j), dx);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), f, acc[r]);
    }
  }
  if constexpr (NR % 4 == 0) {
    for (int r = 0; r < NR; r += 4)
      _mm_storeu_ps(out + r, hsum4(acc[r], acc[r + 1], acc[r + 2], acc[r + 3]));
  } else {
    for (int r = 0; r < NR; ++r) out[r] = hsum(acc[r]);
  }
}

inline float scale_f32(DType t, uint16_t s);

// Codes with operands() (kHasOperands): each chunk is unpacked once for several tokens.
template <class C, class = void>
struct HasOperands : std::false_type {};
template <class C>
struct HasOperands<C, std::void_t<decltype(C::kHasOperands)>> : std::true_type {};

// rows_dot for TB tokens at once (a small batch of decoding sequences): NR rows (row r's chunk j
// at w[r] + j kChunkBytes), each chunk loaded and unpacked once and
// multiplied with every token's activations (token t's codes at xq + t k, scales at xd + t nb,
// offset lanes at off + t 16 nc), its results to out[t][0..NR). The same operations per token and
// row as rows_dot, so the same floats.
template <class Codes, int G, DType ST, int NR, int TB>
inline void rows_dot_tokens(const Codes& cd, const uint8_t* const* w, const uint16_t* const* sw,
                            int64_t ng, const int8_t* xq, int64_t k, const float* xd, int64_t nb,
                            const int32_t* off, int64_t nc, float* const* out) {
  __m512 acc[TB][NR];
  for (int t = 0; t < TB; ++t)
    for (int r = 0; r < NR; ++r) acc[t][r] = _mm512_setzero_ps();
  for (int64_t j = 0; j < nc; ++j)
    for (int r = 0; r < NR; ++r) {
      __m512i h0, h1;
      cd.operands(w[r] + j * Codes::kChunkBytes, &h0, &h1);
      const __m512 ws = chunk_scales<G, ST>(sw[r], j);
      for (int t = 0; t < TB; ++t) {
        const int8_t* x = xq + t * k + j * kChunk;
        const __m512i o = _mm512_loadu_si512(off + t * 16 * nc + 16 * j);
        const __m512i d = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(o, h0, _mm512_loadu_si512(x)), h1,
                                              _mm512_loadu_si512(x + 64));
        const __m512 dx = _mm512_broadcast_f32x4(_mm_loadu_ps(xd + t * nb + 4 * j));
        acc[t][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_mul_ps(ws, dx), acc[t][r]);
      }
    }
  for (int t = 0; t < TB; ++t)
    for (int r = 0; r < NR; r += 4)
      _mm_storeu_ps(out[t] + r, hsum4(acc[t][r], acc[t][r + 1], acc[t][r + 2], acc[t][r + 3]));
}

// The scale type is a template parameter so that no test of it is left in the inner loop.
template <class Codes, int G, DType ST>
void decode_quant_st(const QuantMatmulArgs& a, const Codes& cd) {
  constexpr int64_t kRowBytes = Codes::kChunkBytes;  // per 128 elements
  const int64_t k = a.k, nb = k / kBlock, ng = k / G, nc = k / kChunk, kc = nc * kChunk;
  const int64_t row_bytes = k * kRowBytes / kChunk;
  ActTile at;
  auto* off = reinterpret_cast<int32_t*>(carve_act_tile(a.scratch, k, &at));  // [n_tokens][16 nc]
  const auto* codes = static_cast<const uint8_t*>(a.w);
  const auto* scales = static_cast<const uint16_t*>(a.scales);
  const int n_tok = a.n_tokens;
  for (int t = 0; t < n_tok && !a.reuse_x; ++t) {
    quantize_act_avx512(a.x + t * a.ldx, k, at.q + t * k, at.d + t * nb, at.s + t * nb);
    offset_lanes(at.q + t * k, nc, Codes::kOffsetLog2, off + t * 16 * nc);
  }

  // Row-major codes only: the backend's copies are panels (matmul_q4_panel_avx512.h).
  constexpr int kRows = Codes::kDecodeRows;
  // Tokens of a small batch four at a time over whole chunks of NR rows (a shorter last chunk and
  // the remaining tokens go through rows_dot); returns the tokens done.
  auto rows_tokens = [&](auto nr, const uint8_t* const* w, const uint16_t* const* sw,
                         int64_t r) -> int {
    constexpr int NR = decltype(nr)::value;
    if (kc < k) return 0;
    // Four rows by up to four tokens: sixteen accumulators.
    auto block = [&](auto tb, int t) {
      constexpr int TB = decltype(tb)::value;
      for (int g = 0; g < NR; g += 4) {
        float* out[TB];
        for (int i = 0; i < TB; ++i) out[i] = a.y + (t + i) * a.ldy + (r + g - a.r0);
        rows_dot_tokens<Codes, G, ST, 4, TB>(cd, w + g, sw + g, ng, at.q + t * k, k, at.d + t * nb,
                                             nb, off + t * 16 * nc, nc, out);
      }
    };
    int t = 0;
    for (; t + 4 <= n_tok; t += 4) block(std::integral_constant<int, 4>(), t);
    if (n_tok - t == 3) block(std::integral_constant<int, 3>(), t), t += 3;
    if (n_tok - t == 2) block(std::integral_constant<int, 2>(), t), t += 2;
    return t;
  };
  auto run = [&](auto nr_tag, int64_t r) {
    constexpr int NR = decltype(nr_tag)::value;
    const uint8_t* w[NR];
    const uint16_t* sw[NR];
    for (int i = 0; i < NR; ++i) {
      w[i] = codes + (r + i) * row_bytes;
      sw[i] = scales + (r + i) * ng;
      // The scales are a second, slower stream: keep it 32 rows ahead too.
      for (int64_t b = 0; b < 2 * ng; b += 64)
        prefetch(reinterpret_cast<const char*>(scales + (r + i + 32) * ng) + b);
    }
    int t = 0;
    if constexpr (HasOperands<Codes>::value && NR % 4 == 0)
      if (n_tok > 1) t = rows_tokens(std::integral_constant<int, NR>(), w, sw, r);
    for (; t < n_tok; ++t) {
      const int8_t* xq = at.q + t * k;
      float dot[NR];
      rows_dot<Codes, G, ST, NR>(cd, w, sw, ng, xq, at.d + t * nb, off + t * 16 * nc, nc, dot);
      if (kc < k) {  // a shorter last chunk of m blocks
        const int m = int((k - kc) / kBlock);
        const float* sx = at.s + t * nb + kc / kBlock;
        const float* dx = at.d + t * nb + kc / kBlock;
        for (int i = 0; i < NR; ++i) {
          int32_t isum[4];
          cd.tail(w[i] + nc * kRowBytes, xq + kc, m, isum);
          for (int b = 0; b < m; ++b)
            dot[i] += dx[b] * scale_f32(ST, sw[i][(kc + kBlock * b) / G]) *
                      (float(isum[b]) - float(1 << Codes::kOffsetLog2) * sx[b]);
        }
      }
      for (int i = 0; i < NR; ++i) a.y[t * a.ldy + (r - a.r0) + i] = dot[i];
    }
  };
  int64_t r = a.r0;
  if constexpr (kRows > 4)
    for (; r + kRows <= a.r1; r += kRows) run(std::integral_constant<int, kRows>(), r);
  for (; r + 4 <= a.r1; r += 4) run(std::integral_constant<int, 4>(), r);
  for (; r < a.r1; ++r) run(std::integral_constant<int, 1>(), r);
}

template <class Codes, int G>
void decode_quant(const QuantMatmulArgs& a, const Codes& cd = Codes()) {
  if (a.scale_dtype == DType::BF16)
    decode_quant_st<Codes, G, DType::BF16>(a, cd);
  else
    decode_quant_st<Codes, G, DType::F16>(a, cd);
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

// 32 dequantized values (lo: elements 0-15, hi: 16-31) to dst, as bf16 or f32.
template <bool BF16>
inline void store32(void* dst, int64_t e, __m512 lo, __m512 hi);

inline uint16_t to_bf16_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// Stores 32 floats (lo: elements 0-15, hi: 16-31) as bf16.
inline void store_bf16x32(uint16_t* dst, __m512 lo, __m512 hi) {
  const __m512bh v = _mm512_cvtne2ps_pbh(hi, lo);
  _mm512_storeu_si512(dst, reinterpret_cast<const __m512i&>(v));
}

template <>
inline void store32<true>(void* dst, int64_t e, __m512 lo, __m512 hi) {
  store_bf16x32(static_cast<uint16_t*>(dst) + e, lo, hi);
}
template <>
inline void store32<false>(void* dst, int64_t e, __m512 lo, __m512 hi) {
  _mm512_storeu_ps(static_cast<float*>(dst) + e, lo);
  _mm512_storeu_ps(static_cast<float*>(dst) + e + 16, hi);
}

template <bool BF16>
inline void store1(void* dst, int64_t e, float v) {
  if constexpr (BF16)
    static_cast<uint16_t*>(dst)[e] = to_bf16_bits(v);
  else
    static_cast<float*>(dst)[e] = v;
}

// Dequantization shared by the Q8, Q4 and Q4-codebook rows. One full chunk: h0 and h1 hold the
// signed int8 values of its two halves already in block order (slots_to_blocks); each block is
// scaled by its group's scale and stored at element c0 + 32 b.
template <int G, bool BF16>
inline void store_chunk_i8(__m512i h0, __m512i h1, const uint16_t* scales, DType st, int64_t c0,
                           void* dst) {
  for (int b = 0; b < 4; ++b) {
    const __m512 sc = _mm512_set1_ps(scale_f32(st, scales[(c0 + 32 * b) / G]));
    const __m512 f0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lane128(h0, b)));
    const __m512 f1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(lane128(h1, b)));
    store32<BF16>(dst, c0 + 32 * b, _mm512_mul_ps(f0, sc), _mm512_mul_ps(f1, sc));
  }
}

// A row's short last chunk (m < 4 blocks, when k is not a multiple of 128), element by element:
// value(h, p) is the signed value in slot p of half h (quant/FORMAT.md).
template <int G, bool BF16, class Value>
inline void dequant_tail(int64_t k, const uint16_t* scales, DType st, void* dst, Value value) {
  const int64_t kc = k / kChunk * kChunk;
  const int m = int((k - kc) / kBlock);
  for (int b = 0; b < m; ++b)
    for (int h = 0; h < 2; ++h)
      for (int q = 0; q < 4; ++q)
        for (int e = 0; e < 4; ++e) {
          const int64_t i = kc + 32 * b + 16 * h + 4 * q + e;
          store1<BF16>(dst, i, float(value(h, 4 * (m * q + b) + e)) * scale_f32(st, scales[i / G]));
        }
}

// A QuantDequantFn from a one-row dequantizer: row(g, to_bf16, codes, scales, out) writes the row
// whose codes (kChunkBytes per 128 elements) and F16/BF16 scales start there to out, as bf16
// (to_bf16 a std::true_type) or f32 (std::false_type), with g a std::integral_constant of the group
// size.
template <int64_t kChunkBytes, class Row>
inline void dequant_rows_with(const Tensor& w, int64_t r0, int64_t n, void* dst, bool bf16,
                              Row row) {
  const int64_t k = w.cols();
  const auto* codes = static_cast<const uint8_t*>(w.data);
  const auto* scales = static_cast<const uint16_t*>(w.scales);
  with_group(w.group_size, [&](auto g) {
    for (int64_t r = r0; r < r0 + n; ++r) {
      const uint8_t* c = codes + r * (k * kChunkBytes / kChunk);
      const uint16_t* s = scales + r * (k / decltype(g)::value);
      if (bf16)
        row(g, std::true_type(), c, s, static_cast<uint16_t*>(dst) + (r - r0) * k);
      else
        row(g, std::false_type(), c, s, static_cast<float*>(dst) + (r - r0) * k);
    }
  });
}

}  // namespace
}  // namespace hearth::cpu::qk
