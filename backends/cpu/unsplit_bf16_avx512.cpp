// A BF16 LM head kept as its Q8 screen and deltas (head_screen.h), one 16-row group back to its
// kPackBf16 rows: the screen's panel ([chunk][4-column group][row][4 codes + 128], then the chunk's
// F16 scales [block][row]: q8_panel.h) and the deltas ([chunk][4-column group][column][row]) become
// [column pair][row][2] BF16 values. A 64-byte line of codes (16 rows x 4 columns) gives, per
// column, 16 rows' q d in f32 lanes; the deltas added 16 bits up make their high halves the
// weights, and two columns' high halves are one packed line.
#include <immintrin.h>

#include "backends/cpu/kernels.h"
#include "backends/cpu/q8_panel.h"

namespace hearth::cpu {

namespace {

constexpr int64_t kAheadChunks = 2;

void unsplit_bf16_avx512(const uint8_t* panel, const int8_t* delta, int64_t k, uint16_t* out) {
  const int64_t chunk = q8_panel_chunk_bytes(32);
  const __m512i byte = _mm512_set1_epi32(0xff), high = _mm512_set1_epi32(int(0xffff0000u));
  for (int64_t j = 0; j < k / 128; ++j) {
    const uint8_t* pc = panel + j * chunk;
    const int8_t* dc = delta + j * kQ8PanelCodeBytes;
    for (int g = 0; g < 32; ++g) {
      // Both streams a chunk ahead (into the next group's at the end: a whole head's next call).
      _mm_prefetch(reinterpret_cast<const char*>(pc + chunk * kAheadChunks + 64 * g), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(dc + kQ8PanelCodeBytes * kAheadChunks + 64 * g),
                   _MM_HINT_T0);
      const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(
          reinterpret_cast<const __m256i*>(pc + kQ8PanelCodeBytes + g / 8 * 32)));
      const __m512 off = _mm512_mul_ps(d, _mm512_set1_ps(-128.f));  // codes are q + 128
      const __m512i codes = _mm512_loadu_si512(pc + 64 * g);
      __m512i w[4];
      for (int t = 0; t < 4; ++t) {
        const __m512i u = _mm512_and_si512(_mm512_srli_epi32(codes, 8 * t), byte);
        // (u - 128) d, exact: 8 bits of code times 11 of scale.
        const __m512 p = _mm512_fmadd_ps(_mm512_cvtepi32_ps(u), d, off);
        const __m512i dl = _mm512_slli_epi32(
            _mm512_cvtepi8_epi32(
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(dc + 64 * g + 16 * t))),
            16);
        w[t] = _mm512_add_epi32(_mm512_castps_si512(p), dl);
      }
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

void fill_unsplit_bf16_avx512(KernelTable& k) {
  k.unsplit_bf16 = unsplit_bf16_avx512;
}

}  // namespace hearth::cpu
