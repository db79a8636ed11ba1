// Writes a safetensors file one tensor at a time, so peak memory is the largest tensor, not the
// model. Used by the stand-in generator, the quantizer and the corrupted-checkpoint tests.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace hearth {

struct TensorToWrite {
  std::string name;
  std::string dtype;  // safetensors spelling: "F32", "F16", "BF16", "I32", "U8", "I8"
  std::vector<int64_t> shape;
  size_t nbytes = 0;
  // Fills exactly nbytes at dst; called once, in file order.
  std::function<void(uint8_t* dst)> fill;
};

// Writes header (8-byte little-endian length, JSON padded with spaces so the data starts at a
// multiple of 64 bytes) then the data, in the given order. Each tensor must start on a multiple of
// its element size (order wider dtypes first, as the safetensors library does); one that would not
// is refused.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace hearth
