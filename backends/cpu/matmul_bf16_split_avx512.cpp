// A BF16 LM head kept as its Q8 screen and deltas (head_screen.h): one token's logits, and a
// 16-row group rebuilt as its kPackBf16 rows. Per 16-row group, the screen's panel ([chunk]
// [4-column group][row][4 codes + 128], then the chunk's F16 scales [block][row]: q8_panel.h) and
// the deltas ([chunk][4-column group][column][row]); a 64-byte line of codes (16 rows x 4 columns)
// gives, per column, 16 rows' q d in f32 lanes, and the deltas added 16 bits up make their high
// halves the weights: multiplied there, or two columns' high halves stored as one packed line.
#include <immintrin.h>

#include <cmath>

#include "backends/cpu/kernels.h"
#include "backends/cpu/q8_panel.h"

namespace hearth::cpu {

namespace {

constexpr int64_t kAheadChunks = 2;  // both streams' prefetch distance

// Column t of a 64-byte line of codes for 16 rows, rebuilt with its deltas dc (16 bytes): the
// weights in the high halves of f32 lanes, the low halves as the codes and scales left them.
inline __m512i rebuild_column(__m512i codes, int t, __m512 d, __m512 off, const int8_t* dc) {
  const __m512i u = _mm512_and_si512(_mm512_srli_epi32(codes, 8 * t), _mm512_set1_epi32(0xff));
  // (u - 128) d, exact: 8 bits of code times 11 of scale.
  const __m512 p = _mm512_fmadd_ps(_mm512_cvtepi32_ps(u), d, off);
  const __m512i dl = _mm512_slli_epi32(
      _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(dc))), 16);
  return _mm512_add_epi32(_mm512_castps_si512(p), dl);
}

void matmul_bf16_split_avx512(const SplitBf16Args& a) {
  const int64_t k = a.k, chunk = q8_panel_chunk_bytes(32), group = q8_panel_group_bytes(k, 32);
  const __m512i high = _mm512_set1_epi32(int(0xffff0000u));
  for (int64_t g0 = a.r0; g0 < a.r1; g0 += 16) {
    const uint8_t* panel = a.panel + g0 / 16 * group;
    const int8_t* delta = a.delta + g0 * k;
    // One chain, columns in order: the packed kernel's sum of each row. (Two groups' chains at
    // once were no faster: the loop is bound by its operations, not the FMA latency.)
    __m512 acc = _mm512_setzero_ps();
    for (int64_t j = 0; j < k / 128; ++j) {
      const uint8_t* pc = panel + j * chunk;
      const int8_t* dc = delta + j * kQ8PanelCodeBytes;
      const float* x = a.x + 128 * j;
      for (int b = 0; b < 4; ++b) {
        const __m512 d = _mm512_cvtph_ps(
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pc + kQ8PanelCodeBytes + 32 * b)));
        const __m512 off = _mm512_mul_ps(d, _mm512_set1_ps(-128.f));
        for (int g = 8 * b; g < 8 * b + 8; ++g) {
          _mm_prefetch(reinterpret_cast<const char*>(pc + chunk * kAheadChunks + 64 * g),
                       _MM_HINT_T0);
          _mm_prefetch(
              reinterpret_cast<const char*>(dc + kQ8PanelCodeBytes * kAheadChunks + 64 * g),
              _MM_HINT_T0);
          const __m512i codes = _mm512_loadu_si512(pc + 64 * g);
          for (int t = 0; t < 4; ++t) {
            const __m512i w =
                _mm512_and_si512(rebuild_column(codes, t, d, off, dc + 64 * g + 16 * t), high);
            acc = _mm512_fmadd_ps(_mm512_castsi512_ps(w), _mm512_set1_ps(x[4 * g + t]), acc);
          }
        }
      }
    }
    float* y = a.y + (g0 - a.r0);
    _mm512_storeu_ps(y, acc);
    add_split_exceptions(a, g0 / 16, y);
  }
}

void unsplit_bf16_avx512(const uint8_t* panel, const int8_t* delta, int64_t k, uint16_t* out) {
  const int64_t chunk = q8_panel_chunk_bytes(32);
  const __m512i high = _mm512_set1_epi32(int(0xffff0000u));
  for (int64_t j = 0; j < k / 128; ++j) {
    const uint8_t* pc = panel + j * chunk;
    const int8_t* dc = delta + j * kQ8PanelCodeBytes;
    for (int g = 0; g < 32; ++g) {
      // Both streams kAheadChunks ahead (into the next group's at the end: a whole head's next
      // call).
      _mm_prefetch(reinterpret_cast<const char*>(pc + chunk * kAheadChunks + 64 * g), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(dc + kQ8PanelCodeBytes * kAheadChunks + 64 * g),
                   _MM_HINT_T0);
      const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(pc + kQ8PanelCodeBytes + g / 8 * 32)));
      const __m512 off = _mm512_mul_ps(d, _mm512_set1_ps(-128.f));  // codes are q + 128
      const __m512i codes = _mm512_loadu_si512(pc + 64 * g);
      __m512i w[4];
      for (int t = 0; t < 4; ++t) w[t] = rebuild_column(codes, t, d, off, dc + 64 * g + 16 * t);
      // Row i's dword: the even column's high half below the odd one's (a | (b & c)).
      uint16_t* o = out + (128 * j + 4 * g) / 2 * 32;
      _mm512_storeu_si512(o,
                          _mm512_ternarylogic_epi32(_mm512_srli_epi32(w[0], 16), w[1], high, 0xF8));
      _mm512_storeu_si512(o + 32,
                          _mm512_ternarylogic_epi32(_mm512_srli_epi32(w[2], 16), w[3], high, 0xF8));
    }
  }
}

}  // namespace

void fill_matmul_bf16_split_avx512(KernelTable& k) {
  k.matmul_bf16_split = matmul_bf16_split_avx512;
  k.unsplit_bf16 = unsplit_bf16_avx512;
}

}  // namespace hearth::cpu
