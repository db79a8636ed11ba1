// The hearth quantized weight formats (Q8, Q4), dtypes like the others: sizes, code placement,
// per-tensor schemes, round-to-nearest encoding and dequantization, shared by the quantizer, the
// loader, the kernels' references and the embedding lookup. The byte layout is specified once, in
// quant/FORMAT.md; everything here follows it.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace hearth::quant {

// Groups, row lengths and the int8 kernels' activation blocks are multiples of this.
constexpr int64_t kBlock = 32;
// Codes are placed within chunks of this many elements (4 blocks); the last chunk of a row may
// hold 1, 2 or 3 blocks.
constexpr int64_t kChunk = 128;

inline bool valid_group(int g) {
  return g == 32 || g == 64 || g == 128;
}
inline bool valid_scale_dtype(DType t) {
  return t == DType::F16 || t == DType::BF16;
}

// Bytes of codes for one row of n elements; the safetensors shape of codes is [rows, that].
inline int64_t row_code_bytes(int bits, int64_t n) {
  return bits == 4 ? n / 2 : n;
}
inline int64_t code_cols(int bits, int64_t n) {
  return row_code_bytes(bits, n);
}
inline int bits_of(DType t) {
  return t == DType::Q4 ? 4 : t == DType::Q8 ? 8 : 0;
}
inline DType dtype_of_bits(int bits) {
  return bits == 4 ? DType::Q4 : DType::Q8;
}
inline int qmax(int bits) {
  return bits == 4 ? 7 : 127;
}
inline int qmin(int bits) {
  return bits == 4 ? -8 : -127;
}

// A 4-bit codebook: the 16 int8 levels a Q4 nibble selects (nibble i means codebook[i] times the
// group's scale), strictly increasing, each in [-127, 127]. One per checkpoint (FORMAT.md).
constexpr int kCodebookSize = 16;
using Codebook = std::array<int8_t, kCodebookSize>;
// Validates levels read from a file; throws hearth::Error naming `where`.
Codebook codebook_from(const std::vector<int64_t>& levels, const std::string& where);

// How one tensor is stored. bits 16 means "kept float" (no codes, no scales).
struct Scheme {
  int bits = 4;
  int group = 32;
  DType scale_dtype = DType::F16;
  bool quantized() const { return bits == 4 || bits == 8; }
  bool operator==(const Scheme& o) const {
    return bits == o.bits && (!quantized() || (group == o.group && scale_dtype == o.scale_dtype));
  }
  bool operator!=(const Scheme& o) const { return !(*this == o); }
};
std::string scheme_str(const Scheme& s);  // "int4 g32 F16", "bf16"

// Bits per weight of a scheme including its scales.
double scheme_bits_per_weight(const Scheme& s, int float_bits = 16);

// The safetensors name of the scales of the codes tensor NAME ("x.weight" -> "x.weight_scale").
inline std::string scale_name(const std::string& name) {
  return name + "_scale";
}

// Where element i of a row of n elements lives (FORMAT.md): in the chunk starting at c0 with m
// blocks, in half h (Q8: bytes [c0 + 16 m h, +16 m); Q4: the low (h = 0) or high nibble of bytes
// [c0 / 2, +16 m)), at slot p of that half.
struct Slot {
  int64_t c0;
  int m, h, p;
};
Slot slot_of(int64_t i, int64_t n);
// Byte offset within a row of element i's code, and whether it is a high nibble (Q4).
int64_t code_byte(int bits, int64_t i, int64_t n, bool* high);

float scale_to_f32(DType t, uint16_t s);
uint16_t scale_from_f32(DType t, float s);

// Placing one row of n codes (n a multiple of 32): q[i] is element i's code, in [-127, 127] (Q8)
// or [-8, 7] (Q4; with a codebook, q + 8 is the level's index); dst gets row_code_bytes bytes.
void pack_row(int bits, const int8_t* q, int64_t n, uint8_t* dst);
void unpack_row(int bits, const uint8_t* src, int64_t n, int8_t* q);

// Codes for n weights against the stored scale d (already rounded to its storage type): w / d
// clamped to [lo, hi] and rounded to nearest even, as FORMAT.md specifies; all zeros when d is 0.
void round_codes(const float* w, int64_t n, float d, int lo, int hi, int8_t* q);

// Round to nearest with the max-magnitude scale, the plain encoding of a row of n weights (n a
// multiple of s.group): per group, Q8 maps the largest |w| onto 127, Q4 the largest-magnitude
// weight onto -8; codes are rounded against the scale as stored (quant::quantize_row's Rtn, and the
// backends' own re-encodings, e.g. the CPU backend's screened LM head).
void quantize_row_rtn(const float* w, int64_t n, const Scheme& s, int8_t* q, uint16_t* scales);

// Row `row` of a Q8/Q4 (or plain) weight, widened to f32 in element order; scratch-free, for the
// embedding lookup, references and tests. With c1 >= 0 only elements [c0, c1) (c0 a multiple of
// 128) are produced, into out[0, c1 - c0).
void dequantize_row(const Tensor& t, int64_t row, float* out, int64_t c0 = 0, int64_t c1 = -1);

// Bytes a weight occupies in memory: codes plus scales (plain types: nbytes).
size_t weight_bytes(const Tensor& t);

// Checks a quantized Tensor view for internal consistency (group divides cols, code bytes match
// the shape, scale type); throws hearth::Error naming `what`.
void check_quantized_view(const Tensor& t, const std::string& what);

}  // namespace hearth::quant
