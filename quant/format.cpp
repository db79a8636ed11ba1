#include "quant/format.h"

#include <vector>

#include "core/error.h"

namespace hearth::quant {

float scale_to_f32(DType t, uint16_t s) {
  return t == DType::BF16 ? bf16_to_f32(s) : f16_to_f32(s);
}

uint16_t scale_from_f32(DType t, float s) {
  return t == DType::BF16 ? f32_to_bf16(s) : f32_to_f16(s);
}

void scales_to_f32(DType t, const void* scales, int64_t i0, int64_t n, float* out) {
  const auto* s = static_cast<const uint16_t*>(scales) + i0;
  for (int64_t i = 0; i < n; ++i) out[i] = scale_to_f32(t, s[i]);
}

void pack_q4_row(const int8_t* q, int64_t n, uint8_t* dst) {
  for (int64_t c0 = 0; c0 < n; c0 += kQ4Chunk) {
    const int64_t half = (n - c0 < kQ4Chunk ? n - c0 : kQ4Chunk) / 2;
    uint8_t* d = dst + c0 / 2;
    for (int64_t j = 0; j < half; ++j)
      d[j] = uint8_t((q[c0 + j] + 8) | (q[c0 + j + half] + 8) << 4);
  }
}

void unpack_q4_row(const uint8_t* src, int64_t n, int8_t* q) {
  for (int64_t c0 = 0; c0 < n; c0 += kQ4Chunk) {
    const int64_t half = (n - c0 < kQ4Chunk ? n - c0 : kQ4Chunk) / 2;
    const uint8_t* s = src + c0 / 2;
    for (int64_t j = 0; j < half; ++j) {
      q[c0 + j] = int8_t((s[j] & 15) - 8);
      q[c0 + j + half] = int8_t((s[j] >> 4) - 8);
    }
  }
}

void dequantize_row(const Tensor& t, int64_t row, float* out) {
  const int64_t n = t.cols();
  if (!t.quantized()) {
    const size_t esz = dtype_size(t.dtype);
    to_f32(t.dtype, static_cast<const uint8_t*>(t.data) + size_t(row * n) * esz, out, size_t(n));
    return;
  }
  const int bits = bits_of(t.dtype);
  const int64_t g = t.group_size, ng = n / g;
  const auto* codes = static_cast<const uint8_t*>(t.data) + row * row_code_bytes(bits, n);
  const auto* sc = static_cast<const uint16_t*>(t.scales) + row * ng;
  if (bits == 8) {
    const auto* c = reinterpret_cast<const int8_t*>(codes);
    for (int64_t i = 0; i < n; ++i) out[i] = float(c[i]) * scale_to_f32(t.scale_dtype, sc[i / g]);
    return;
  }
  for (int64_t c0 = 0; c0 < n; c0 += kQ4Chunk) {
    const int64_t half = (n - c0 < kQ4Chunk ? n - c0 : kQ4Chunk) / 2;
    const uint8_t* s = codes + c0 / 2;
    for (int64_t j = 0; j < half; ++j) {
      const int64_t lo = c0 + j, hi = c0 + j + half;
      out[lo] = float((s[j] & 15) - 8) * scale_to_f32(t.scale_dtype, sc[lo / g]);
      out[hi] = float((s[j] >> 4) - 8) * scale_to_f32(t.scale_dtype, sc[hi / g]);
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
}

}  // namespace hearth::quant
