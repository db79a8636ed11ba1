// AVX2 attention: q/out rows f32 [n_tok][group][head_dim] (strided per token), one KV head's cache
// rows [position][head_dim] in F32/F16/BF16/I8; key tiles of 64 positions shared by up to 16 query
// rows, online softmax per row, f32 throughout (16-bit and I8 caches are widened tile by tile, I8
// codes times their position's scale and, for keys, the channel factors).
#include <cmath>
#include <cstring>

#include "backends/cpu/kernels.h"
#include "backends/cpu/ops.h"
#include "backends/cpu/simd_avx2.h"

namespace hearth::cpu {

namespace {

constexpr int kTile = int(kAttnKeyTile);
constexpr int kRows = int(kAttnRowsPerBlock);
static_assert(kTile % 8 == 0, "key tiles are whole vectors");

// Eight vectors in, one out: lane j is the sum of v[j]'s lanes.
inline __m256 reduce8(const __m256* v) {
  __m256 s[4], w[2];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i)
    s[i] = _mm256_add_ps(_mm256_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                         _mm256_unpackhi_ps(v[2 * i], v[2 * i + 1]));
#pragma GCC unroll 2
  for (int i = 0; i < 2; ++i) {
    const __m256d a = _mm256_castps_pd(s[2 * i]), b = _mm256_castps_pd(s[2 * i + 1]);
    w[i] = _mm256_add_ps(_mm256_castpd_ps(_mm256_unpacklo_pd(a, b)),
                         _mm256_castpd_ps(_mm256_unpackhi_pd(a, b)));
  }
  return _mm256_add_ps(_mm256_permute2f128_ps(w[0], w[1], 0x20),
                       _mm256_permute2f128_ps(w[0], w[1], 0x31));
}

template <DType T>
void widen_tile(const void* src, int p0, int n, int hd, float* dst) {
  const uint16_t* s = static_cast<const uint16_t*>(src) + int64_t(p0) * hd;
  for (int64_t i = 0; i < int64_t(n) * hd; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    __m256 f;
    if constexpr (T == DType::F16)
      f = _mm256_cvtph_ps(h);
    else
      f = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    _mm256_storeu_ps(dst + i, f);
  }
}

// Dequantizes rows [p0, p0 + n) of an I8 cache: code * scale[p] * factor[d] (factor null: ones).
void widen_tile_i8(const void* src, const float* scale, const float* factor, int p0, int n, int hd,
                   float* dst) {
  const int8_t* s = static_cast<const int8_t*>(src) + int64_t(p0) * hd;
  for (int j = 0; j < n; ++j)
    for (int d = 0; d < hd; d += 8) {
      const __m128i c = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(s + int64_t(j) * hd + d));
      __m256 f =
          _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(c)), _mm256_set1_ps(scale[p0 + j]));
      if (factor) f = _mm256_mul_ps(f, _mm256_loadu_ps(factor + d));
      _mm256_storeu_ps(dst + int64_t(j) * hd + d, f);
    }
}

// Scaled scores of one query row against n keys into s (whole vectors; lanes past n are -inf).
inline void scores(const float* q, const float* kt, int n, int hd, float scale, float* s) {
  for (int j0 = 0; j0 < n; j0 += 8) {
    __m256 acc[8];
    const float* rows[8];
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      acc[j] = _mm256_setzero_ps();
      rows[j] = kt + int64_t(j0 + j < n ? j0 + j : n - 1) * hd;
    }
    for (int c = 0; c < hd; c += 8) {
      const __m256 qc = _mm256_loadu_ps(q + c);
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j)
        acc[j] = _mm256_fmadd_ps(qc, _mm256_loadu_ps(rows[j] + c), acc[j]);
    }
    _mm256_storeu_ps(s + j0, _mm256_mul_ps(reduce8(acc), _mm256_set1_ps(scale)));
    for (int j = n - j0; j < 8; ++j) s[j0 + j] = -INFINITY;
  }
}

inline void accumulate_v(const float* e, const float* vt, int n, int hd, float* o) {
  int d0 = 0;
  for (; d0 + 64 <= hd; d0 += 64) {
    __m256 ov[8];
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) ov[c] = _mm256_loadu_ps(o + d0 + c * 8);
    for (int j = 0; j < n; ++j) {
      const __m256 ej = _mm256_set1_ps(e[j]);
      const float* vr = vt + int64_t(j) * hd + d0;
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) ov[c] = _mm256_fmadd_ps(ej, _mm256_loadu_ps(vr + c * 8), ov[c]);
    }
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) _mm256_storeu_ps(o + d0 + c * 8, ov[c]);
  }
  for (; d0 < hd; d0 += 8) {
    __m256 ov = _mm256_loadu_ps(o + d0);
    for (int j = 0; j < n; ++j)
      ov = _mm256_fmadd_ps(_mm256_set1_ps(e[j]), _mm256_loadu_ps(vt + int64_t(j) * hd + d0), ov);
    _mm256_storeu_ps(o + d0, ov);
  }
}

template <DType T>
void attention_avx2(const AttentionArgs& a) {
  const int hd = a.head_dim;
  if (hd % 8 != 0) {
    attention_rows_ref(a, T);
    return;
  }
  float* acc = a.scratch;             // [kRows][hd]
  float* m = acc + kRows * hd;        // [kRows]
  float* l = m + kRows;               // [kRows]
  float* s = l + kRows;               // [kTile]
  float* ktile = s + kTile;           // [kTile][hd], 16-bit caches only
  float* vtile = ktile + kTile * hd;  // [kTile][hd]
  const int n_rows = a.n_tok * a.group;
  for (int r0 = 0; r0 < n_rows; r0 += kRows) {
    const int nr = n_rows - r0 < kRows ? n_rows - r0 : kRows;
    // The end of the positions row i sees (rows are token-major, so the last row sees most).
    auto visible = [&](int i) {
      const int end = a.pos0 + (r0 + i) / a.group + 1;
      return end < a.kv_end ? end : a.kv_end;
    };
    for (int i = 0; i < nr; ++i) {
      m[i] = -INFINITY;
      l[i] = 0.f;
      std::memset(acc + i * hd, 0, size_t(hd) * 4);
    }
    const int n_pos = visible(nr - 1);
    for (int p0 = a.kv_begin; p0 < n_pos; p0 += kTile) {
      const int tile_n = n_pos - p0 < kTile ? n_pos - p0 : kTile;
      const float* kt;
      const float* vt;
      if constexpr (T == DType::F32) {
        kt = static_cast<const float*>(a.k) + int64_t(p0) * hd;
        vt = static_cast<const float*>(a.v) + int64_t(p0) * hd;
      } else if constexpr (T == DType::I8) {
        widen_tile_i8(a.k, a.k_scale, a.k_factor, p0, tile_n, hd, ktile);
        widen_tile_i8(a.v, a.v_scale, nullptr, p0, tile_n, hd, vtile);
        kt = ktile;
        vt = vtile;
      } else {
        widen_tile<T>(a.k, p0, tile_n, hd, ktile);
        widen_tile<T>(a.v, p0, tile_n, hd, vtile);
        kt = ktile;
        vt = vtile;
      }
      for (int i = 0; i < nr; ++i) {
        const int n = visible(i) - p0 < tile_n ? visible(i) - p0 : tile_n;
        if (n <= 0) continue;
        const int r = r0 + i;
        scores(a.q + (r / a.group) * a.q_stride + (r % a.group) * hd, kt, n, hd, a.scale, s);
        __m256 mx = _mm256_set1_ps(-INFINITY);
        for (int j = 0; j < n; j += 8) mx = _mm256_max_ps(mx, _mm256_loadu_ps(s + j));
        const float tile_max = hmax256(mx);
        const float m_new = tile_max > m[i] ? tile_max : m[i];
        float* o = acc + i * hd;
        if (m_new > m[i]) {
          const __m256 c = exp256(_mm256_set1_ps(m[i] - m_new));
          l[i] *= _mm256_cvtss_f32(c);
          for (int d = 0; d < hd; d += 8)
            _mm256_storeu_ps(o + d, _mm256_mul_ps(_mm256_loadu_ps(o + d), c));
          m[i] = m_new;
        }
        __m256 sum = _mm256_setzero_ps();
        for (int j = 0; j < n; j += 8) {
          const __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(s + j), _mm256_set1_ps(m_new)));
          sum = _mm256_add_ps(sum, e);
          _mm256_storeu_ps(s + j, e);
        }
        l[i] += hsum256(sum);
        accumulate_v(s, vt, n, hd, o);
      }
    }
    for (int i = 0; i < nr; ++i) {
      const int r = r0 + i;
      float* out = a.out + (r / a.group) * a.out_stride + (r % a.group) * hd;
      if (a.ml) {  // a partial range: the caller merges and normalises
        a.ml[2 * r] = m[i], a.ml[2 * r + 1] = l[i];
        std::memcpy(out, acc + i * hd, size_t(hd) * 4);
        continue;
      }
      const __m256 inv = _mm256_set1_ps(1.f / l[i]);
      for (int d = 0; d < hd; d += 8)
        _mm256_storeu_ps(out + d, _mm256_mul_ps(_mm256_loadu_ps(acc + i * hd + d), inv));
    }
  }
}

}  // namespace

void fill_attention_avx2(KernelTable& k) {
  k.attention[type_slot(DType::F32)] = attention_avx2<DType::F32>;
  k.attention[type_slot(DType::F16)] = attention_avx2<DType::F16>;
  k.attention[type_slot(DType::BF16)] = attention_avx2<DType::BF16>;
  k.attention[type_slot(DType::I8)] = attention_avx2<DType::I8>;
}

}  // namespace hearth::cpu
