// Element types and scalar conversions. Weights keep their stored type; kernels widen to f32.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace hearth {

// I8 is only a KV cache type: int8 codes with per-row scales kept beside them by the backend.
enum class DType : uint8_t { F32, F16, BF16, I32, Q8, Q4, I8 };

// Bytes per element for plain types (quantized types are sized by their own layout in quant/).
size_t dtype_size(DType t);
const char* dtype_name(DType t);
// Parses safetensors' spelling ("F32", "F16", "BF16", "I32"); returns false for anything else.
bool dtype_from_safetensors(const std::string& s, DType* out);

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even, as PyTorch does; NaN stays NaN.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Widens n elements of a plain type to f32.
void to_f32(DType t, const void* src, float* dst, size_t n);

}  // namespace hearth
