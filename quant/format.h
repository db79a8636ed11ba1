// The hearth quantized weight formats (Q8, Q4): sizes, nibble packing and dequantization, shared
// by the quantizer, the loader, the kernels' references and the embedding lookup. The byte layout
// is specified once, in quant/FORMAT.md; everything here follows it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace hearth::quant {

// Q4 rows are packed in chunks of this many elements (the last chunk of a row may be shorter).
constexpr int64_t kQ4Chunk = 128;
// Groups and rows are multiples of this; it is also the activation block of the int8 kernels.
constexpr int64_t kBlock = 32;

inline bool valid_bits(int bits) { return bits == 4 || bits == 8; }
inline bool valid_group(int g) { return g == 32 || g == 64 || g == 128; }
inline bool valid_scale_dtype(DType t) { return t == DType::F16 || t == DType::BF16; }

// Bytes of codes for one row of n elements.
inline int64_t row_code_bytes(int bits, int64_t n) { return bits == 4 ? n / 2 : n; }
// Codes per byte-column: the safetensors shape of the codes is [rows, code_cols].
inline int64_t code_cols(int bits, int64_t n) { return row_code_bytes(bits, n); }
inline int bits_of(DType t) { return t == DType::Q4 ? 4 : t == DType::Q8 ? 8 : 0; }
inline DType dtype_of_bits(int bits) { return bits == 4 ? DType::Q4 : DType::Q8; }
inline int qmax(int bits) { return bits == 4 ? 7 : 127; }
inline int qmin(int bits) { return bits == 4 ? -8 : -127; }

// The safetensors name of the scales of the codes tensor NAME ("x.weight" -> "x.weight_scale").
inline std::string scale_name(const std::string& name) { return name + "_scale"; }

float scale_to_f32(DType t, uint16_t s);
uint16_t scale_from_f32(DType t, float s);
// Widens n scales of type t starting at element i0.
void scales_to_f32(DType t, const void* scales, int64_t i0, int64_t n, float* out);

// Q4 packing of one row: q[i] in [-8, 7] for i < n (n a multiple of 32); dst gets n / 2 bytes.
void pack_q4_row(const int8_t* q, int64_t n, uint8_t* dst);
void unpack_q4_row(const uint8_t* src, int64_t n, int8_t* q);

// Element i of a Q4 row: the byte holding it and whether it is the high nibble.
inline void q4_position(int64_t i, int64_t n, int64_t* byte, bool* high) {
  const int64_t c0 = i / kQ4Chunk * kQ4Chunk;
  const int64_t len = n - c0 < kQ4Chunk ? n - c0 : kQ4Chunk;
  const int64_t j = i - c0;
  *high = j >= len / 2;
  *byte = c0 / 2 + (*high ? j - len / 2 : j);
}

// Row `row` of a Q8/Q4 (or plain) weight, widened to f32; scratch-free, for embedding lookups,
// references and tests.
void dequantize_row(const Tensor& t, int64_t row, float* out);

// Bytes a weight occupies in memory: codes plus scales (plain types: nbytes).
size_t weight_bytes(const Tensor& t);

// Checks a quantized Tensor view for internal consistency (group divides cols, code bytes match
// the shape, scale type); throws hearth::Error naming `what`.
void check_quantized_view(const Tensor& t, const std::string& what);

}  // namespace hearth::quant
