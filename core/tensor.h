// A tensor is a non-owning view: a dtype, a shape (outermost first, like PyTorch) and a pointer,
// usually into an mmap'd checkpoint or a backend's arena. Rows are contiguous.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace hearth {

struct Tensor {
  DType dtype = DType::F32;
  int ndim = 0;
  std::array<int64_t, 4> shape{0, 0, 0, 0};
  const void* data = nullptr;
  size_t nbytes = 0;  // of data; for Q8/Q4 the codes only
  // Q8/Q4 weights (layout in quant/FORMAT.md): one scale per group_size consecutive elements of a
  // row, stored [rows, cols / group_size] as scale_dtype (F16 or BF16), kept apart from the codes
  // so both stay exactly as the checkpoint stores them and are used in place from the mmap.
  const void* scales = nullptr;
  DType scale_dtype = DType::F16;
  int group_size = 0;
  // Q4 only: the checkpoint's 16-level codebook (int8 levels indexed by the nibble,
  // quant/FORMAT.md), owned by the model's weights; null for the uniform grid (nibble - 8).
  const int8_t* codebook = nullptr;

  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return ndim ? n : 0;
  }
  int64_t rows() const { return ndim ? numel() / shape[ndim - 1] : 0; }
  int64_t cols() const { return ndim ? shape[ndim - 1] : 0; }
  bool empty() const { return data == nullptr; }
  bool quantized() const { return dtype == DType::Q8 || dtype == DType::Q4; }
  std::vector<int64_t> shape_vec() const { return {shape.begin(), shape.begin() + ndim}; }
};

std::string shape_str(const std::vector<int64_t>& shape);  // "[64, 32]"

}  // namespace hearth
