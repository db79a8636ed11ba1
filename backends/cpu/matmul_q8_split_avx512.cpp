// A Q8 LM head kept as its 5-bit screen and the 3 low bits of its codes (layouts in
// head_screen.h), AVX-512 VNNI. Per 4-row group and 128-element chunk, each row's high bits (64
// bytes of nibbles, 16 of fifth bits) and low bits (32 bytes of pairs, 16 of third bits) are
// rebuilt into the codes as vpdpbusd's unsigned operand, 8 u + l = q + 128, and multiplied by the
// int8 activations exactly as the Q8 kernel's; the offset lanes take 128 x their sum back out.
// Also the screen's refinement by the low bits alone (KernelTable::refine_q8_split).
#include "backends/cpu/head_screen.h"
#include "backends/cpu/matmul_quant_avx512.h"

namespace hearth::cpu {

namespace {

using namespace qk;

constexpr int kOffsetLog2 = 7;  // q + 128

// The unsigned codes of both halves of one row's chunk from its high bits c and low bits l. A
// 16-byte lane q of half h finds its fifth bits at bit 4 h + q of the broadcast high bytes (moved
// to bit 4 by a per-lane shift, as the screen does) and its third bits likewise (rotated to bit
// 2); slots 32 c + m find their pairs at bits 2 (2 h + c) of byte m (a per-256-bit shift).
struct SplitDecoder {
  const __m512i m4 = _mm512_set1_epi8(0x0F), sixteen = _mm512_set1_epi8(16);
  const __m512i three = _mm512_set1_epi8(3), seven = _mm512_set1_epi8(7);
  const __m512i left = _mm512_setr_epi32(4, 4, 4, 4, 3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1);
  const __m512i right = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  // Bit 4 h + q to bit 2: a left rotation by 2 - 4 h - q (mod 32).
  const __m512i rot0 = _mm512_setr_epi32(2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0, 31, 31, 31, 31);
  const __m512i rot1 =
      _mm512_setr_epi32(30, 30, 30, 30, 29, 29, 29, 29, 28, 28, 28, 28, 27, 27, 27, 27);
  const __m512i pair0 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
  const __m512i pair1 = _mm512_add_epi16(pair0, _mm512_set1_epi16(4));

  // Both halves' low bits l in bits 0-2 of their bytes, garbage above.
  void low(const uint8_t* l, __m512i* l0, __m512i* l1) const {
    const __m512i pairs =
        _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(l)));
    const __m512i third =
        _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(l + 32)));
    // Pair bits 0-1 and third bit 2 (0xE4: c ? a : b).
    *l0 = _mm512_ternarylogic_epi32(_mm512_srlv_epi16(pairs, pair0), _mm512_rolv_epi32(third, rot0),
                                    three, 0xE4);
    *l1 = _mm512_ternarylogic_epi32(_mm512_srlv_epi16(pairs, pair1), _mm512_rolv_epi32(third, rot1),
                                    three, 0xE4);
  }
  void codes(const uint8_t* c, const uint8_t* l, __m512i* b0, __m512i* b1) const {
    const __m512i nib = _mm512_loadu_si512(c);
    const __m512i high =
        _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c + 64)));
    // u = nibble | (fifth bit at bit 4) (0xF8: a | (b & c)); u < 32, so u << 3 stays in its byte.
    const __m512i u0 = _mm512_ternarylogic_epi32(_mm512_and_si512(nib, m4),
                                                 _mm512_sllv_epi32(high, left), sixteen, 0xF8);
    const __m512i u1 = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(nib, 4), m4),
                                                 _mm512_srlv_epi32(high, right), sixteen, 0xF8);
    __m512i l0, l1;
    low(l, &l0, &l1);
    *b0 = _mm512_ternarylogic_epi32(_mm512_slli_epi16(u0, 3), l0, seven, 0xF8);
    *b1 = _mm512_ternarylogic_epi32(_mm512_slli_epi16(u1, 3), l1, seven, 0xF8);
  }
};

// One token against the 4-row group at (hi, lo) with row scales sw (ng a row): y[0..4). ahead:
// the bytes of the high bits to prefetch ahead of those read (the low bits' in proportion), or 0.
template <int G, DType ST>
void group_dot(const SplitDecoder& dec, const uint8_t* hi, const uint8_t* lo, const uint16_t* sw,
               int64_t ng, int64_t nc, const int8_t* xq, const float* xd, const int32_t* off,
               int64_t ahead, float* y) {
  __m512 acc[4];
  for (int r = 0; r < 4; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t j = 0; j < nc; ++j) {
    if (ahead) {
      const uint8_t* h = hi + 4 * j * kScreenQ8ChunkBytes + ahead;
      const uint8_t* l = lo + 4 * j * kScreenLowChunkBytes + ahead / 5 * 3;
      for (int i = 0; i < 4 * kScreenQ8ChunkBytes; i += 64) prefetch(h + i);
      for (int i = 0; i < 4 * kScreenLowChunkBytes; i += 64) prefetch(l + i);
    }
    const __m512i xa = _mm512_loadu_si512(xq + j * kChunk);
    const __m512i xb = _mm512_loadu_si512(xq + j * kChunk + 64);
    const __m512i o = _mm512_loadu_si512(off + 16 * j);
    const __m512 dx = _mm512_broadcast_f32x4(_mm_loadu_ps(xd + 4 * j));
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      __m512i b0, b1;
      dec.codes(hi + (4 * j + r) * kScreenQ8ChunkBytes, lo + (4 * j + r) * kScreenLowChunkBytes,
                &b0, &b1);
      const __m512i d = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(o, b0, xa), b1, xb);
      const __m512 f = _mm512_mul_ps(chunk_scales<G, ST>(sw + r * ng, j), dx);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), f, acc[r]);
    }
  }
  _mm_storeu_ps(y, hsum4(acc[0], acc[1], acc[2], acc[3]));
}

// Tokens a tile at a time (kTokenTile quantized together), each over every group: steps of one
// token are what reads the head this way (batched steps read panels: head_screen.h).
template <int G, DType ST>
void split_st(const QuantMatmulArgs& a) {
  const int64_t k = a.k, nb = k / kBlock, ng = k / G, nc = k / kChunk;
  ActTile at;
  auto* off = reinterpret_cast<int32_t*>(carve_act_tile(a.scratch, k, &at));  // [tile][16 nc]
  const auto* hi = static_cast<const uint8_t*>(a.w);
  const auto* lo = static_cast<const uint8_t*>(a.w_il);
  const auto* scales = static_cast<const uint16_t*>(a.scales);
  const SplitDecoder dec;
  const bool reuse = a.reuse_x && a.n_tokens <= kTokenTile;
  // A stream of groups is prefetched as the Q8 kernel's rows are (kPrefetchAhead); the scattered
  // groups of a screened head are not.
  const int64_t ahead = a.r1 - a.r0 >= 64 ? kPrefetchAhead / 128 * kScreenQ8ChunkBytes : 0;
  for (int t0 = 0; t0 < a.n_tokens; t0 += kTokenTile) {
    const int n = int(min64(kTokenTile, a.n_tokens - t0));
    for (int t = 0; t < n && !reuse; ++t) {
      quantize_act_avx512(a.x + (t0 + t) * a.ldx, k, at.q + t * k, at.d + t * nb, at.s + t * nb);
      offset_lanes(at.q + t * k, nc, kOffsetLog2, off + t * 16 * nc);
    }
    for (int64_t r = a.r0; r < a.r1; r += 4)
      for (int t = 0; t < n; ++t)
        group_dot<G, ST>(dec, hi + r * nc * kScreenQ8ChunkBytes, lo + r * nc * kScreenLowChunkBytes,
                         scales + r * ng, ng, nc, at.q + t * k, at.d + t * nb, off + t * 16 * nc,
                         ahead, a.y + (t0 + t) * a.ldy + (r - a.r0));
  }
}

// The low bits' part of one token's logits for the 4-row group at a.row, less what the screen took
// them as (head_screen.h): per lane f (x' . l - kScreenMid sum x'), on the int8 activations and
// lane sums the AVX-512 screen left in its scratch (screen_q8_avx512.cpp).
template <int G, DType ST>
void refine_st(const RefineQ8Args& a) {
  const int64_t k = a.k, nc = k / kChunk, ng = k / G;
  ActTile at;
  float* rest = carve_act_tile(a.scratch, k, &at);
  const ScreenToken t = screen_token(at.q, at.d, rest, nc, 16);
  const auto* sw = static_cast<const uint16_t*>(a.scales) + a.row * ng;
  const uint8_t* lo = a.lo + a.row * nc * kScreenLowChunkBytes;
  const SplitDecoder dec;
  // The next group's bytes a chunk at a time, spread over this one's work rather than all at its
  // start: 4 x 48 bytes of low bits a chunk, and a line of its 4 rows' scales (at most a chunk's).
  const char* next_lo = nullptr;
  const char* next_sw = nullptr;
  if (a.next_row >= 0) {
    next_lo = reinterpret_cast<const char*>(a.lo + a.next_row * nc * kScreenLowChunkBytes);
    next_sw = static_cast<const char*>(a.scales) + a.next_row * ng * 2;
  }
  __m512 acc[4];
  for (int r = 0; r < 4; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t j = 0; j < nc; ++j) {
    if (next_lo) {
      for (int64_t i = 0; i < 4 * kScreenLowChunkBytes; i += 64)
        prefetch(next_lo + 4 * j * kScreenLowChunkBytes + i);
      if (64 * j < 4 * ng * 2) prefetch(next_sw + 64 * j);
    }
    const __m512i xa = _mm512_loadu_si512(t.q + j * kChunk);
    const __m512i xb = _mm512_loadu_si512(t.q + j * kChunk + 64);
    const __m512 mid = _mm512_loadu_ps(t.mid + 16 * j);
    const __m512 dx = _mm512_broadcast_f32x4(_mm_loadu_ps(t.d + 4 * j));
#pragma GCC unroll 4
    for (int r = 0; r < 4; ++r) {
      __m512i l0, l1;
      dec.low(lo + (4 * j + r) * kScreenLowChunkBytes, &l0, &l1);
      l0 = _mm512_and_si512(l0, dec.seven);
      l1 = _mm512_and_si512(l1, dec.seven);
      const __m512i d =
          _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), l0, xa), l1, xb);
      const __m512 f = _mm512_mul_ps(chunk_scales<G, ST>(sw + r * ng, j), dx);
      acc[r] = _mm512_fmadd_ps(_mm512_sub_ps(_mm512_cvtepi32_ps(d), mid), f, acc[r]);
    }
  }
  _mm_storeu_ps(a.corr, hsum4(acc[0], acc[1], acc[2], acc[3]));
}

void refine_q8_split_avx512(const RefineQ8Args& a) {
  with_group_scales(a.group, a.scale_dtype, [&](auto g, auto st) {
    refine_st<decltype(g)::value, decltype(st)::value>(a);
  });
}

void matmul_q8_split_avx512(const QuantMatmulArgs& a) {
  with_group_scales(a.group, a.scale_dtype,
                    [&](auto g, auto st) { split_st<decltype(g)::value, decltype(st)::value>(a); });
}

}  // namespace

void fill_matmul_q8_split_avx512(KernelTable& k) {
  k.matmul_q8_split = matmul_q8_split_avx512;
  k.refine_q8_split = refine_q8_split_avx512;
}

}  // namespace hearth::cpu
