// The 5-bit screen of a Q8 LM head (layout and bound in head_screen.h), AVX-512 VNNI. Per 4-row
// group and 128-element chunk, each row's 80 bytes: 64 bytes of nibbles (half 0 low, half 1 high)
// and 16 bytes of high bits, broadcast to every 16-byte lane and shifted there by the lane's own
// amount so that its bits sit at bit 4 of its bytes; nibble | that bit gives u = h + 16, the
// unsigned operand of vpdpbusd against the same int8 activations as the Q8 kernel. Rows are read
// as two streams, as the panel kernels read Q8 and Q4 groups (matmul_q4_panel_avx512.h), and
// prefetched as they are: the hardware prefetchers alone left an Intel Xeon's screen at 74% of
// the read bandwidth (bench/RESULTS.md, "Prefetches that run"). Also a BF16 head's screen rows
// (screen_row.h) on 64-byte vectors.
#include "backends/cpu/head_screen.h"
#include "backends/cpu/matmul_quant_avx512.h"
#include "backends/cpu/prefetch.h"
#include "backends/cpu/screen_row.h"

namespace hearth::cpu {

namespace {

using namespace qk;

constexpr int64_t kChunkBytes = kScreenQ8ChunkBytes;
// How far ahead of each stream the codes are prefetched, as the panel kernels' kPanelAhead.
constexpr int64_t kScreenAhead = 2048;

// A stream's codes kScreenAhead ahead of chunk j of its group at c (the groups of a stream are
// contiguous), and a line of the next group's scales per chunk (the group's nc chunks then cover
// its 32 nc bytes of scales at group size 32, and more). prefetch_line: GCC deleted these
// prefetches as __builtin_prefetch while this function was not inlined (prefetch.h).
inline void prefetch_screen(const uint8_t* c, const uint16_t* sw, int64_t ng, int64_t j) {
  for (int64_t b = 0; b < 4 * kChunkBytes; b += 64)
    prefetch_line(c + 4 * j * kChunkBytes + kScreenAhead + b);
  prefetch_line(reinterpret_cast<const uint8_t*>(sw + 4 * ng) + 64 * j);
}

ScreenToken prepare(const ScreenQ8Args& a) {
  const int64_t k = a.k, nc = k / kChunk;
  ActTile at;
  float* rest = carve_act_tile(a.scratch, k, &at);
  const ScreenToken t = screen_token(at.q, at.d, rest, nc, 16);
  if (!a.reuse_x) {
    quantize_act_avx512(a.x, k, at.q, at.d, at.s);
    const __m512i ones = _mm512_set1_epi8(1), zero = _mm512_setzero_si512();
    for (int64_t j = 0; j < nc; ++j) {
      const __m512i xa = _mm512_loadu_si512(at.q + j * kChunk);
      const __m512i xb = _mm512_loadu_si512(at.q + j * kChunk + 64);
      const __m512i sum = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, ones, xa), ones, xb);
      const __m512i sabs = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, _mm512_abs_epi8(xa), ones),
                                               _mm512_abs_epi8(xb), ones);
      _mm512_storeu_si512(t.init + 16 * j,
                          _mm512_sub_epi32(zero, _mm512_slli_epi32(sum, kScreenOffsetLog2)));
      _mm512_storeu_ps(t.mid + 16 * j,
                       _mm512_mul_ps(_mm512_cvtepi32_ps(sum), _mm512_set1_ps(kScreenMid)));
      _mm512_storeu_ps(t.abs + 16 * j, _mm512_cvtepi32_ps(sabs));
    }
  }
  return t;
}

// S streams of one 4-row group each (codes at w[s], scales at sw[s]): est[s][r] the estimate and
// tsum[s][r] the sum the bound scales (head_screen.h).
template <int G, DType ST, int S>
void groups_dot(const uint8_t* const* w, const uint16_t* const* sw, int64_t ng,
                const ScreenToken& t, int64_t nc, float* const* est, float* const* tsum) {
  const __m512i m4 = _mm512_set1_epi8(0x0F), sixteen = _mm512_set1_epi8(16);
  // 16-byte lane q of half 0 finds its high bits at bit q, of half 1 at bit 4 + q.
  const __m512i left = _mm512_setr_epi32(4, 4, 4, 4, 3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1);
  const __m512i right = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
  const __m512 step = _mm512_set1_ps(float(kScreenStep));
  __m512 acc[S][4], acct[S][4];
  for (int s = 0; s < S; ++s)
    for (int r = 0; r < 4; ++r) acc[s][r] = acct[s][r] = _mm512_setzero_ps();
  for (int64_t j = 0; j < nc; ++j) {
    const __m512i xa = _mm512_loadu_si512(t.q + j * kChunk);
    const __m512i xb = _mm512_loadu_si512(t.q + j * kChunk + 64);
    const __m512i init = _mm512_loadu_si512(t.init + 16 * j);
    const __m512 mid = _mm512_loadu_ps(t.mid + 16 * j);
    const __m512 abs = _mm512_loadu_ps(t.abs + 16 * j);
    const __m512 dx = _mm512_broadcast_f32x4(_mm_loadu_ps(t.d + 4 * j));
    for (int s = 0; s < S; ++s) prefetch_screen(w[s], sw[s], ng, j);
    for (int s = 0; s < S; ++s)
      for (int r = 0; r < 4; ++r) {
        const uint8_t* c = w[s] + (4 * j + r) * kChunkBytes;
        const __m512i nib = _mm512_loadu_si512(c);
        const __m512i high =
            _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(c + 64)));
        // u = nibble | (high bits shifted to bit 4) & 16, one ternary op (0xF8: a | (b & c)).
        const __m512i u0 = _mm512_ternarylogic_epi32(_mm512_and_si512(nib, m4),
                                                     _mm512_sllv_epi32(high, left), sixteen, 0xF8);
        const __m512i u1 =
            _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srli_epi16(nib, 4), m4),
                                      _mm512_srlv_epi32(high, right), sixteen, 0xF8);
        const __m512i h = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(init, u0, xa), u1, xb);
        // kScreenStep sum h x' + kScreenMid sum x', exact in f32 (under 2^20 in magnitude, in
        // halves).
        const __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(h), step, mid);
        const __m512 f = _mm512_mul_ps(chunk_scales<G, ST>(sw[s] + r * ng, j), dx);
        acc[s][r] = _mm512_fmadd_ps(v, f, acc[s][r]);
        acct[s][r] = _mm512_fmadd_ps(_mm512_abs_ps(f), abs, acct[s][r]);
      }
  }
  for (int s = 0; s < S; ++s) {
    _mm_storeu_ps(est[s], hsum4(acc[s][0], acc[s][1], acc[s][2], acc[s][3]));
    _mm_storeu_ps(tsum[s], hsum4(acct[s][0], acct[s][1], acct[s][2], acct[s][3]));
  }
}

template <int G, DType ST>
void screen_st(const ScreenQ8Args& a) {
  const ScreenToken t = prepare(a);
  const int64_t k = a.k, nc = k / kChunk, ng = k / G, row_bytes = nc * kChunkBytes;
  const auto* scales = static_cast<const uint16_t*>(a.scales);
  // Whole groups as two streams: [r0, r0 + half) beside [r0 + half, r0 + 2 half).
  const int64_t half = (a.r1 - a.r0) / 8 * 4;
  for (int64_t r = a.r0; r < a.r0 + half; r += 4) {
    const int64_t i = r - a.r0;
    const uint8_t* w[2] = {a.codes + r * row_bytes, a.codes + (r + half) * row_bytes};
    const uint16_t* sw[2] = {scales + r * ng, scales + (r + half) * ng};
    float* est[2] = {a.est + i, a.est + i + half};
    float* tsum[2] = {a.hw + i, a.hw + i + half};
    groups_dot<G, ST, 2>(w, sw, ng, t, nc, est, tsum);
  }
  if (const int64_t r = a.r0 + 2 * half; r < a.r1) {
    const uint8_t* w[1] = {a.codes + r * row_bytes};
    const uint16_t* sw[1] = {scales + r * ng};
    float* est[1] = {a.est + (r - a.r0)};
    float* tsum[1] = {a.hw + (r - a.r0)};
    groups_dot<G, ST, 1>(w, sw, ng, t, nc, est, tsum);
  }
  const float factor = kScreenMid + float(nc + 8) / 32768.f;
  for (int64_t i = 0; i < a.r1 - a.r0; ++i) a.hw[i] *= factor;
}

void screen_q8_avx512(const ScreenQ8Args& a) {
  with_group_scales(a.group, a.scale_dtype, [&](auto g, auto st) {
    screen_st<decltype(g)::value, decltype(st)::value>(a);
  });
}

}  // namespace

void fill_screen_q8_avx512(KernelTable& k) {
  k.screen_q8 = screen_q8_avx512;
  k.screen_row_bf16 = screen_row<64>;
}

}  // namespace hearth::cpu
