// The byte placement of Q8/Q4 codes, written straight from quant/FORMAT.md and independent of
// quant/, for the tests that build or read packed weights themselves.
#pragma once
#include <algorithm>
#include <cstdint>

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

}  // namespace hearth::test
