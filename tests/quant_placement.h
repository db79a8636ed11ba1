// The byte placement of Q8/Q4 codes, written straight from quant/FORMAT.md and independent of
// quant/, for the tests that build or read packed weights themselves.
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "backends/cpu/kernels.h"

namespace hearth::test {

// Where element i of a row of n codes goes: chunks of 128 elements (the last may hold m < 4
// blocks); element 32b + 16h + 4q + e sits at slot 4(m q + b) + e of half h; Q8 halves are
// consecutive 16m-byte runs, Q4 halves the low and high nibbles of 16m bytes. Returns the byte;
// *high tells a Q4 code in the high nibble.
inline int64_t q_place(int bits, int64_t i, int64_t n, bool* high) {
  const int64_t c0 = i / 128 * 128, m = std::min<int64_t>(128, n - c0) / 32, r = i - c0;
  const int64_t b = r / 32, h = (r % 32) / 16, q = (r % 16) / 4, e = r % 4;
  const int64_t p = 4 * (m * q + b) + e;
  *high = bits == 4 && h == 1;
  return bits == 4 ? c0 / 2 + p : c0 + 16 * m * h + p;
}

// Packs q[rows * cols] (Q8 codes in [-127, 127]; Q4 codes in [-8, 7], stored as q + 8) by
// q_place, row after row.
inline std::vector<uint8_t> pack_codes(int bits, const int8_t* q, int64_t rows, int64_t cols) {
  const int64_t row_bytes = bits == 4 ? cols / 2 : cols;
  std::vector<uint8_t> out(size_t(rows * row_bytes), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < cols; ++i) {
      bool high;
      uint8_t& b = out[size_t(r * row_bytes + q_place(bits, i, cols, &high))];
      const int c = q[r * cols + i];
      if (bits == 8)
        b = uint8_t(int8_t(c));
      else
        b = uint8_t(b | (uint8_t(c + 8) << (high ? 4 : 0)));
    }
  return out;
}

// A Q8/Q4 weight view over codes and scales [rows, cols / group] of type st.
inline Tensor quantized_view(int bits, int64_t rows, int64_t cols,
                             const std::vector<uint8_t>& codes, const std::vector<uint16_t>& scales,
                             DType st, int group, const int8_t* codebook = nullptr) {
  Tensor t;
  t.dtype = bits == 8 ? DType::Q8 : DType::Q4;
  t.ndim = 2;
  t.shape = {rows, cols, 0, 0};
  t.data = codes.data();
  t.nbytes = codes.size();
  t.scales = scales.data();
  t.scale_dtype = st;
  t.group_size = group;
  t.codebook = codebook;
  return t;
}

// A quantized matmul call on rows [r0, r1) of a [*, k] weight (codes, scales of type st per `group`
// elements, codebook cb or null) against x [T][ldx], row r0's output at y (row stride ldy).
struct QuantCall {
  const void* codes;
  const void* scales;
  DType st;
  int group;
  const int8_t* codebook;
  int64_t k;
};
inline cpu::QuantMatmulArgs quant_args(const QuantCall& w, const float* x, int64_t ldx, int T,
                                       float* y, int64_t ldy, int64_t r0, int64_t r1,
                                       float* scratch) {
  cpu::QuantMatmulArgs a;
  a.w = w.codes;
  a.k = w.k;
  a.x = x;
  a.ldx = ldx;
  a.n_tokens = T;
  a.y = y;
  a.ldy = ldy;
  a.r0 = r0;
  a.r1 = r1;
  a.scratch = scratch;
  a.scales = w.scales;
  a.scale_dtype = w.st;
  a.group = w.group;
  a.codebook = w.codebook;
  return a;
}

}  // namespace hearth::test
