// BF16 weights in 12 bits each, losslessly: decode reads a BF16 matrix once per token, so a copy
// of a quarter fewer bytes that a kernel rebuilds bit for bit in registers is that much less to
// wait for. A weight's 16 bits are its high byte (sign, exponent bits 7..1) and its low byte
// (exponent bit 0, mantissa). Within 4 rows and 64 columns the high bytes span few values: a 4-bit
// code holds the sign and d = base - (exponent >> 1) for d in [0, 6], where base is the largest
// exponent >> 1 there; d = 7 stands for zero. A weight further below that block's largest (a 2^-13
// fraction of it or less: ~0.1% of a heavy-tailed stand-in's weights, ~0.5% if the base were the
// whole rows', which outlier columns raise) is stored as zero and kept exactly as an exception,
// whose product the matmul adds after its sum.
//
// Layout, per group of 16 rows: a header of the bases (4 bytes per block of 64 columns, byte j for
// rows 4 j .. 4 j + 3; rounded up to 64 bytes), then k / 8 units of 192 bytes, each 16 rows x 8
// columns. A block's table (coded_table_entry) has a 16-byte lane per j mapping a code c to the
// high byte of rows 4 j .. 4 j + 3. A unit is 128 low bytes, then 64 bytes of codes: the low byte
// of row i = 4 j + r, column 2 l + h of the unit (line l, as kPackBf16 holds columns in pairs) is
// byte 64 (l / 2) + 16 j + 8 (l % 2) + 2 r + h; its code is the low nibble (l < 2) or the high one
// (l >= 2) of code byte 16 j + 8 (l % 2) + 2 r + h. So one byte shuffle of the codes through the
// table gives 64 high bytes, and interleaving them with 64 low bytes per 128-bit lane
// (unpacklo/hi) gives two kPackBf16 lines. After the groups: a uint32 per group, its count of
// exceptions.
//
// Exceptions (a copy of their own, sized from those counts): offsets [groups + 1], then per
// exception its position in the group (column * 16 + row) and value, in group then column order.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>

namespace hearth::cpu {

constexpr int64_t kCodedRows = 16;
constexpr int64_t kCodedBlockCols = 64;
constexpr int64_t kCodedUnitCols = 8;
constexpr int64_t kCodedUnitBytes = 192;
constexpr int64_t kCodedBlockUnits = kCodedBlockCols / kCodedUnitCols;

inline int64_t coded_header_bytes(int64_t k) {
  return ((k + kCodedBlockCols - 1) / kCodedBlockCols * 4 + 63) / 64 * 64;
}
inline int64_t coded_group_bytes(int64_t k) {
  return coded_header_bytes(k) + k / kCodedUnitCols * kCodedUnitBytes;
}
// Entry c of a block's table for rows whose base is `base` (what the kernels build from it).
inline uint8_t coded_table_entry(int base, int c) {
  const int d = c & 7, sign = c >> 3;
  return uint8_t(sign << 7 | (d == 7 ? 0 : (base - d) & 0xFF));
}
// Whole groups, whole kPackBf16 chunks of 32 columns, positions that fit CodedException::pos.
inline bool coded_fits(int64_t rows, int64_t k) {
  return rows > 0 && rows % kCodedRows == 0 && k > 0 && k % 32 == 0 && k < (int64_t(1) << 27);
}
inline int64_t coded_bf16_bytes(int64_t rows, int64_t k) {
  return rows / kCodedRows * (coded_group_bytes(k) + 4);
}

struct CodedException {
  uint32_t pos;  // column * 16 + row within the group
  float w;       // the weight
};

// Groups [g0, g1) of row-major BF16 bits src [rows][k] into the coded copy at `coded` (sized by
// coded_bf16_bytes), with their exception counts.
void code_bf16_groups(const uint16_t* src, int64_t rows, int64_t k, int64_t g0, int64_t g1,
                      uint8_t* coded);
// The exceptions' copy's size, from the counts of a coded copy (all groups coded).
int64_t coded_exceptions_bytes(const uint8_t* coded, int64_t rows, int64_t k);
// Groups [g0, g1)'s offsets and exceptions into exc, from src and its coded copy; offsets[groups]
// by whichever call holds the last group.
void code_bf16_exceptions(const uint16_t* src, int64_t rows, int64_t k, const uint8_t* coded,
                          int64_t g0, int64_t g1, uint8_t* exc);
// Exceptions of all groups over a fraction of the weights: a matrix better kept packed.
bool coded_too_irregular(const uint8_t* coded, int64_t rows, int64_t k);

// A coded matrix as the matmuls read it.
struct CodedBf16 {
  const uint8_t* groups = nullptr;
  const uint32_t* exc_off = nullptr;
  const CodedException* exc = nullptr;
};
CodedBf16 coded_bf16_view(const void* coded, const void* exc, int64_t rows);

// Adds each exception's products to rows [r0, r1) (whole groups) of y, y[t * ldy + r - r0], for T
// tokens of x (row stride ldx): the last term of every coded matmul's sum, in order.
void add_coded_exceptions(const CodedBf16& w, int64_t r0, int64_t r1, const float* x, int64_t ldx,
                          int T, float* y, int64_t ldy);

// One group back to its kPackBf16 lines (16 k values), exceptions as zero (KernelTable::
// decode_bf16_coded); the portable reference the SIMD one is checked against.
void decode_bf16_coded_scalar(const uint8_t* group, int64_t k, uint16_t* packed);
// Rows [r0, r0 + n) (whole groups) back to their packed copy, exceptions included: the BF16 bits
// the packed kernels and GEMMs read.
using DecodeCodedFn = void (*)(const uint8_t* group, int64_t k, uint16_t* packed);
void decode_bf16_rows(DecodeCodedFn decode, const CodedBf16& w, int64_t k, int64_t r0, int64_t n,
                      uint16_t* packed);

// The bytes the coded copies spare a decode step (the BF16 rows' less the coded groups' and
// exceptions'), per source weight, so a weight placed by several compiled graphs counts once.
class CodedSaving {
 public:
  void add(const void* src, double bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    saved_[src] = bytes;
  }
  double total() const {
    std::lock_guard<std::mutex> lock(mu_);
    double sum = 0;
    for (const auto& [src, bytes] : saved_) sum += bytes;
    return sum;
  }

 private:
  mutable std::mutex mu_;
  std::map<const void*, double> saved_;
};

}  // namespace hearth::cpu
