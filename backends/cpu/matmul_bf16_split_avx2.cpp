// A BF16 LM head kept as its Q8 screen and deltas (head_screen.h) on AVX2, as
// matmul_bf16_split_avx512.cpp does it: per 16-row group, the screen's panel ([chunk][4-column
// group][row][4 codes + 128], then the chunk's F16 scales [block][row]: q8_panel.h) and the deltas
// ([chunk][4-column group][column][row]); each 64-byte line of codes is two halves of 8 rows, whose
// columns rebuilt in f32 lanes are multiplied there or stored as packed lines ([column pair][row]
// [2] BF16).
#include <immintrin.h>

#include <cmath>

#include "backends/cpu/kernels.h"
#include "backends/cpu/q8_panel.h"

namespace hearth::cpu {

namespace {

constexpr int64_t kAheadChunks = 2;  // both streams' prefetch distance

// Column t of 8 rows' codes (a line's half), rebuilt with their deltas dc (8 bytes): the weights
// in the high halves of f32 lanes, the low halves as the codes and scales left them.
inline __m256i rebuild_column(__m256i codes, int t, __m256 d, __m256 off, const int8_t* dc) {
  const __m256i u = _mm256_and_si256(_mm256_srli_epi32(codes, 8 * t), _mm256_set1_epi32(0xff));
  // (u - 128) d, exact: 8 bits of code times 11 of scale.
  const __m256 p = _mm256_fmadd_ps(_mm256_cvtepi32_ps(u), d, off);
  const __m256i dl = _mm256_slli_epi32(
      _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(dc))), 16);
  return _mm256_add_epi32(_mm256_castps_si256(p), dl);
}

// The 8 rows' scales of half h of block b of a chunk, and -128 times them.
inline void half_scales(const uint8_t* pc, int b, int h, __m256* d, __m256* off) {
  *d = _mm256_cvtph_ps(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(pc + kQ8PanelCodeBytes + 32 * b + 16 * h)));
  *off = _mm256_mul_ps(*d, _mm256_set1_ps(-128.f));
}

void matmul_bf16_split_avx2(const SplitBf16Args& a) {
  const int64_t k = a.k, chunk = q8_panel_chunk_bytes(32), group = q8_panel_group_bytes(k, 32);
  const __m256i high = _mm256_set1_epi32(int(0xffff0000u));
  for (int64_t g0 = a.r0; g0 < a.r1; g0 += 16) {
    const uint8_t* panel = a.panel + g0 / 16 * group;
    const int8_t* delta = a.delta + g0 * k;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};  // rows 0-7, 8-15
    for (int64_t j = 0; j < k / 128; ++j) {
      const uint8_t* pc = panel + j * chunk;
      const int8_t* dc = delta + j * kQ8PanelCodeBytes;
      const float* x = a.x + 128 * j;
      for (int b = 0; b < 4; ++b) {
        __m256 d[2], off[2];
        for (int h = 0; h < 2; ++h) half_scales(pc, b, h, &d[h], &off[h]);
        for (int g = 8 * b; g < 8 * b + 8; ++g) {
          _mm_prefetch(reinterpret_cast<const char*>(pc + chunk * kAheadChunks + 64 * g),
                       _MM_HINT_T0);
          _mm_prefetch(
              reinterpret_cast<const char*>(dc + kQ8PanelCodeBytes * kAheadChunks + 64 * g),
              _MM_HINT_T0);
          for (int h = 0; h < 2; ++h) {
            const __m256i codes =
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pc + 64 * g + 32 * h));
            for (int t = 0; t < 4; ++t) {
              const __m256i w = _mm256_and_si256(
                  rebuild_column(codes, t, d[h], off[h], dc + 64 * g + 16 * t + 8 * h), high);
              acc[h] =
                  _mm256_fmadd_ps(_mm256_castsi256_ps(w), _mm256_set1_ps(x[4 * g + t]), acc[h]);
            }
          }
        }
      }
    }
    float* y = a.y + (g0 - a.r0);
    _mm256_storeu_ps(y, acc[0]);
    _mm256_storeu_ps(y + 8, acc[1]);
    add_split_exceptions(a, g0 / 16, y);
  }
}

void unsplit_bf16_avx2(const uint8_t* panel, const int8_t* delta, int64_t k, uint16_t* out) {
  const int64_t chunk = q8_panel_chunk_bytes(32);
  const __m256i high = _mm256_set1_epi32(int(0xffff0000u));
  for (int64_t j = 0; j < k / 128; ++j) {
    const uint8_t* pc = panel + j * chunk;
    const int8_t* dc = delta + j * kQ8PanelCodeBytes;
    for (int g = 0; g < 32; ++g) {
      _mm_prefetch(reinterpret_cast<const char*>(pc + chunk * kAheadChunks + 64 * g), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(dc + kQ8PanelCodeBytes * kAheadChunks + 64 * g),
                   _MM_HINT_T0);
      uint16_t* o = out + (128 * j + 4 * g) / 2 * 32;
      for (int h = 0; h < 2; ++h) {
        __m256 d, off;
        half_scales(pc, g / 8, h, &d, &off);
        const __m256i codes =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pc + 64 * g + 32 * h));
        __m256i w[4];
        for (int t = 0; t < 4; ++t)
          w[t] = rebuild_column(codes, t, d, off, dc + 64 * g + 16 * t + 8 * h);
        // Row i's dword: the even column's high half below the odd one's.
        for (int p = 0; p < 2; ++p)
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 32 * p + 16 * h),
                              _mm256_or_si256(_mm256_srli_epi32(w[2 * p], 16),
                                              _mm256_and_si256(w[2 * p + 1], high)));
      }
    }
  }
}

}  // namespace

void fill_matmul_bf16_split_avx2(KernelTable& k) {
  k.matmul_bf16_split = matmul_bf16_split_avx2;
  k.unsplit_bf16 = unsplit_bf16_avx2;
}

}  // namespace hearth::cpu
