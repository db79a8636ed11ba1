#include "core/quant_format.h"

#include <cmath>

#include "core/error.h"

namespace hearth::quant {

Slot slot_of(int64_t i, int64_t n) {
  Slot s;
  s.c0 = i / kChunk * kChunk;
  s.m = int((n - s.c0 < kChunk ? n - s.c0 : kChunk) / kBlock);
  const int r = int(i - s.c0);
  const int b = r / 32, h = (r % 32) / 16, q = (r % 16) / 4, e = r % 4;
  s.h = h;
  s.p = 4 * (s.m * q + b) + e;
  return s;
}

int64_t code_byte(int bits, int64_t i, int64_t n, bool* high) {
  const Slot s = slot_of(i, n);
  *high = bits == 4 && s.h == 1;
  return bits == 4 ? s.c0 / 2 + s.p : s.c0 + 16 * s.m * s.h + s.p;
}

float scale_to_f32(DType t, uint16_t s) {
  return t == DType::BF16 ? bf16_to_f32(s) : f16_to_f32(s);
}

uint16_t scale_from_f32(DType t, float s) {
  return t == DType::BF16 ? f32_to_bf16(s) : f32_to_f16(s);
}

std::string scheme_str(const Scheme& s) {
  if (!s.quantized()) return "float";
  return "int" + std::to_string(s.bits) + " g" + std::to_string(s.group) + " " +
         dtype_name(s.scale_dtype);
}

double scheme_bits_per_weight(const Scheme& s, int float_bits) {
  if (!s.quantized()) return float_bits;
  return s.bits + 16.0 / s.group;
}

namespace {

// Round to nearest even for |v| < 2^22, as nearbyint does in the default rounding mode, without
// the library call baseline x86-64 makes for nearbyintf (this loop runs ~50 times per weight).
inline float round_even(float v) {
  constexpr float kMagic = 12582912.f;  // 1.5 * 2^23
  return (v + kMagic) - kMagic;
}

}  // namespace

// Codes for n weights against the stored scale d (already rounded to its storage type).
void round_codes(const float* w, int64_t n, float d, int lo, int hi, int8_t* q) {
  const float flo = float(lo), fhi = float(hi);
  if (d == 0.f) {
    for (int64_t i = 0; i < n; ++i) q[i] = 0;
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    float v = w[i] / d;  // a division, not a reciprocal: exactly round(w / scale) as specified
    v = v < flo ? flo : v > fhi ? fhi : v;  // clamp first: keeps round_even in range
    q[i] = int8_t(round_even(v));
  }
}

void quantize_row_rtn(const float* w, int64_t n, const Scheme& s, int8_t* q, uint16_t* scales) {
  for (int64_t g = 0; g < n / s.group; ++g) {
    const float* wg = w + g * s.group;
    float amax = 0.f, signed_max = 0.f;  // the largest |w| and the signed weight that has it
    for (int64_t i = 0; i < s.group; ++i)
      if (std::fabs(wg[i]) > amax) {
        amax = std::fabs(wg[i]);
        signed_max = wg[i];
      }
    // Q4 puts the largest-magnitude weight on -8, using all 16 levels; Q8 stays symmetric.
    const float base = s.bits == 4 ? signed_max / -8.f : amax / 127.f;
    scales[g] = scale_from_f32(s.scale_dtype, base);
    round_codes(wg, s.group, scale_to_f32(s.scale_dtype, scales[g]), qmin(s.bits), qmax(s.bits),
                q + g * s.group);
  }
}

Codebook codebook_from(const std::vector<int64_t>& levels, const std::string& where) {
  if (levels.size() != size_t(kCodebookSize))
    fail(where, ": the codebook has ", levels.size(), " entries; a 4-bit codebook has ",
         kCodebookSize);
  Codebook c{};
  for (int i = 0; i < kCodebookSize; ++i) {
    const int64_t v = levels[size_t(i)];
    if (v < -127 || v > 127)
      fail(where, ": codebook entry ", i, " is ", v, ", outside the int8 range [-127, 127]");
    if (i > 0 && v <= c[size_t(i - 1)])
      fail(where, ": codebook entries must increase strictly, but entry ", i, " (", v, ") follows ",
           int(c[size_t(i - 1)]));
    c[size_t(i)] = int8_t(v);
  }
  return c;
}

namespace {

// pack_row and unpack_row walk slot_of's placement chunk by chunk: one call per element cost
// most of the LM head screen's build (a second on one core for a 0.6B head).
template <typename F>
void for_each_slot(int64_t n, F&& f) {
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    const int m = int((n - c0 < kChunk ? n - c0 : kChunk) / kBlock);
    for (int r = 0; r < m * int(kBlock); ++r) {
      const int b = r / 32, h = (r % 32) / 16, q = (r % 16) / 4, e = r % 4;
      f(c0 + r, c0, m, h, 4 * (m * q + b) + e);  // element, then its Slot
    }
  }
}

}  // namespace

void pack_row(int bits, const int8_t* q, int64_t n, uint8_t* dst) {
  if (bits == 8)
    return for_each_slot(n, [&](int64_t i, int64_t c0, int m, int h, int p) {
      dst[c0 + 16 * m * h + p] = uint8_t(q[i]);
    });
  for (int64_t i = 0; i < n / 2; ++i) dst[i] = 0;
  for_each_slot(n, [&](int64_t i, int64_t c0, int, int h, int p) {
    dst[c0 / 2 + p] |= uint8_t((q[i] + 8) << (h ? 4 : 0));
  });
}

void unpack_row(int bits, const uint8_t* src, int64_t n, int8_t* q) {
  if (bits == 8)
    return for_each_slot(n, [&](int64_t i, int64_t c0, int m, int h, int p) {
      q[i] = int8_t(src[c0 + 16 * m * h + p]);
    });
  for_each_slot(n, [&](int64_t i, int64_t c0, int, int h, int p) {
    const uint8_t v = src[c0 / 2 + p];
    q[i] = int8_t((h ? v >> 4 : v & 15) - 8);
  });
}

void dequantize_row(const Tensor& t, int64_t row, float* out, int64_t from, int64_t to) {
  const int64_t n = t.cols();
  if (to < 0 || to > n) to = n;
  if (!t.quantized()) {
    const size_t esz = dtype_size(t.dtype);
    to_f32(t.dtype, static_cast<const uint8_t*>(t.data) + size_t(row * n + from) * esz, out,
           size_t(to - from));
    return;
  }
  out -= from;  // indexed by element below
  const int bits = bits_of(t.dtype);
  const int8_t* cb = bits == 4 ? t.codebook : nullptr;
  const int64_t g = t.group_size, ng = n / g;
  const auto* codes = static_cast<const uint8_t*>(t.data) + row * row_code_bytes(bits, n);
  const auto* sc = static_cast<const uint16_t*>(t.scales) + row * ng;
  // Slot order within a chunk is a fixed permutation: walk it by block, quarter and position.
  for (int64_t c0 = from; c0 < to; c0 += kChunk) {
    const int m = int((n - c0 < kChunk ? n - c0 : kChunk) / kBlock);
    for (int b = 0; b < m; ++b) {
      const float d = scale_to_f32(t.scale_dtype, sc[(c0 + 32 * b) / g]);
      for (int h = 0; h < 2; ++h)
        for (int q = 0; q < 4; ++q)
          for (int e = 0; e < 4; ++e) {
            const int p = 4 * (m * q + b) + e;
            int v;
            if (bits == 8) {
              v = int8_t(codes[c0 + 16 * m * h + p]);
            } else {
              const uint8_t byte = codes[c0 / 2 + p];
              const int nib = h ? byte >> 4 : byte & 15;
              v = cb ? cb[nib] : nib - 8;
            }
            out[c0 + 32 * b + 16 * h + 4 * q + e] = float(v) * d;
          }
    }
  }
}

size_t weight_bytes(const Tensor& t) {
  if (!t.quantized() || t.group_size <= 0) return t.nbytes;
  return t.nbytes + size_t(t.numel() / t.group_size) * 2;
}

void check_quantized_view(const Tensor& t, const std::string& what) {
  const int bits = bits_of(t.dtype);
  if (!bits) fail(what, ": not a quantized tensor (dtype ", dtype_name(t.dtype), ")");
  if (t.ndim != 2) fail(what, ": quantized weights must be 2-D, got ", t.ndim, " dimensions");
  if (!valid_group(t.group_size))
    fail(what, ": group size ", t.group_size, " is not one of 32, 64, 128");
  if (t.cols() % t.group_size != 0)
    fail(what, ": ", t.cols(), " columns are not a multiple of the group size ", t.group_size);
  if (!valid_scale_dtype(t.scale_dtype))
    fail(what, ": scales must be F16 or BF16, got ", dtype_name(t.scale_dtype));
  if (t.nbytes != size_t(t.rows() * row_code_bytes(bits, t.cols())))
    fail(what, ": ", t.nbytes, " bytes of ", bits, "-bit codes for shape ",
         shape_str(t.shape_vec()), ", expected ", t.rows() * row_code_bytes(bits, t.cols()));
  if (!t.data || !t.scales) fail(what, ": codes or scales missing");
  if (t.codebook && bits != 4) fail(what, ": only 4-bit codes can use a codebook");
}

}  // namespace hearth::quant
