#include "backends/cpu/matmul_quant.h"

#include <cmath>

#include "core/quant_format.h"

namespace hearth::cpu::qk {

float* carve_act_tile(float* scratch, int64_t k, ActTile* t) {
  const int64_t nb = k / kBlock;
  t->d = scratch;
  t->s = scratch + kTokenTile * nb;
  t->q = reinterpret_cast<int8_t*>(scratch + 2 * kTokenTile * nb);
  // Codes take k bytes per token; keep what follows 64-byte aligned.
  const int64_t q_floats = (kTokenTile * k / 4 + 15) / 16 * 16;
  return scratch + 2 * kTokenTile * nb + q_floats;
}

void quantize_act_scalar(const float* x, int64_t k, int8_t* q, float* d, float* s) {
  int8_t nat[kChunk];
  for (int64_t c0 = 0; c0 < k; c0 += kChunk) {
    const int m = int((k - c0 < kChunk ? k - c0 : kChunk) / kBlock);
    for (int b = 0; b < m; ++b) {
      const float* xb = x + c0 + 32 * b;
      float amax = 0.f;
      bool finite = true;
      for (int i = 0; i < 32; ++i) {
        amax = std::fabs(xb[i]) > amax ? std::fabs(xb[i]) : amax;
        finite = finite && std::isfinite(xb[i]);
      }
      // A NaN or infinite input makes the block's scale NaN, so every dot it enters is NaN, as in
      // float arithmetic (and no NaN reaches an integer conversion).
      const float inv = finite && amax > 0.f ? 127.f / amax : 0.f;
      int sum = 0;
      for (int i = 0; i < 32; ++i) {
        // Round to nearest even (|x * inv| <= 127) without a libm call: 1.5 * 2^23 as a shifter.
        const int v = finite ? int((xb[i] * inv + 12582912.f) - 12582912.f) : 0;
        nat[32 * b + i] = int8_t(v);
        sum += v;
      }
      d[(c0 + 32 * b) / kBlock] = finite ? amax / 127.f : NAN;
      s[(c0 + 32 * b) / kBlock] = float(sum);
    }
    for (int b = 0; b < m; ++b)
      for (int h = 0; h < 2; ++h)
        for (int qq = 0; qq < 4; ++qq)
          for (int e = 0; e < 4; ++e)
            q[c0 + 16 * m * h + 4 * (m * qq + b) + e] = nat[32 * b + 16 * h + 4 * qq + e];
  }
}

void tail_block_dots(int bits, const uint8_t* w, const int8_t* x, int m, int32_t* isum) {
  // Slot p = 4 (m q + b) + e of either half holds block b's element: loops in that order, with
  // no division per byte, so the compiler can keep the four bytes of a slot in one vector.
  const int half = 16 * m;
  for (int b = 0; b < m; ++b) {
    int32_t sum = 0;
    for (int q = 0; q < 4; ++q)
      for (int e = 0; e < 4; ++e) {
        const int p = 4 * (m * q + b) + e;
        if (bits == 4)
          sum += int32_t(w[p] & 15) * x[p] + int32_t(w[p] >> 4) * x[half + p];
        else
          sum += (int32_t(int8_t(w[p])) + 128) * x[p] +
                 (int32_t(int8_t(w[half + p])) + 128) * x[half + p];
      }
    isum[b] = sum;
  }
}

void tail_block_dots_lut(const uint8_t* w, const int8_t* x, int m, const uint8_t* lut,
                         int32_t* isum) {
  const int half = 16 * m;
  for (int b = 0; b < m; ++b) {
    int32_t sum = 0;
    for (int q = 0; q < 4; ++q)
      for (int e = 0; e < 4; ++e) {
        const int p = 4 * (m * q + b) + e;
        sum += int32_t(lut[w[p] & 15]) * x[p] + int32_t(lut[w[p] >> 4]) * x[half + p];
      }
    isum[b] = sum;
  }
}

void dequant_rows_scalar(const Tensor& w, int64_t r0, int64_t n, void* dst, bool bf16) {
  const int64_t k = w.cols();
  float tmp[kChunk];
  for (int64_t i = 0; i < n; ++i) {
    if (!bf16) {
      quant::dequantize_row(w, r0 + i, static_cast<float*>(dst) + i * k);
      continue;
    }
    uint16_t* out = static_cast<uint16_t*>(dst) + i * k;
    for (int64_t c0 = 0; c0 < k; c0 += kChunk) {
      const int64_t c1 = c0 + kChunk < k ? c0 + kChunk : k;
      quant::dequantize_row(w, r0 + i, tmp, c0, c1);
      for (int64_t e = c0; e < c1; ++e) out[e] = f32_to_bf16(tmp[e - c0]);
    }
  }
}

void matmul_dequant_scalar(const QuantMatmulArgs& a, DType type) {
  Tensor t;
  t.dtype = type;
  t.ndim = 2;
  t.shape = {a.r1, a.k, 0, 0};
  t.data = a.w;
  t.scales = a.scales;
  t.scale_dtype = a.scale_dtype;
  t.group_size = a.group;
  t.codebook = a.codebook;
  for (int64_t r = a.r0; r < a.r1; ++r) {
    quant::dequantize_row(t, r, a.scratch);
    for (int tok = 0; tok < a.n_tokens; ++tok) {
      const float* x = a.x + tok * a.ldx;
      float s = 0.f;
      for (int64_t i = 0; i < a.k; ++i) s += a.scratch[i] * x[i];
      a.y[tok * a.ldy + (r - a.r0)] = s;
    }
  }
}

}  // namespace hearth::cpu::qk
