// The coded BF16 copy's making and portable reading (layout in bf16_coded.h).
#include "backends/cpu/bf16_coded.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backends/cpu/kernels.h"

namespace hearth::cpu {

namespace {

// Where row i (of the group), column o (of the unit) keeps its low byte, and its code (the same
// byte of the code block; the high nibble where `high`).
struct Slot {
  int64_t lo;
  int64_t code;
  bool high;
};
Slot slot(int64_t i, int64_t o) {
  const int64_t j = i / 4, r = i % 4, l = o / 2, h = o % 2;
  const int64_t p = 16 * j + 8 * (l % 2) + 2 * r + h;
  return {64 * (l / 2) + p, 128 + p, l >= 2};
}

constexpr int kZeroCode = 7;

// Where the packed copy (kPackBf16) keeps row i of a group, column c: line c / 2 holds the 16
// rows' pairs (c, c + 1).
int64_t packed_index(int64_t i, int64_t c) {
  return (c / 2) * 32 + 2 * i + c % 2;
}

uint32_t* counts(uint8_t* coded, int64_t rows, int64_t k) {
  return reinterpret_cast<uint32_t*>(coded + rows / kCodedRows * coded_group_bytes(k));
}
const uint32_t* counts(const uint8_t* coded, int64_t rows, int64_t k) {
  return reinterpret_cast<const uint32_t*>(coded + rows / kCodedRows * coded_group_bytes(k));
}

int64_t exception_total(const uint8_t* coded, int64_t rows, int64_t k) {
  const uint32_t* n = counts(coded, rows, k);
  int64_t total = 0;
  for (int64_t g = 0; g < rows / kCodedRows; ++g) total += n[g];
  return total;
}

// The 4-bit code of bits given its rows' base, or -1 for an exception.
int code_of(uint16_t bits, int base) {
  const int sign = bits >> 15;
  if ((bits & 0x7FFF) == 0) return sign << 3 | kZeroCode;
  const int d = base - ((bits >> 8) & 0x7F);
  return d <= 6 ? sign << 3 | d : -1;
}

// The 4 bases (largest exponent >> 1 of rows 4 j .. 4 j + 3) of columns [c0, c1) of the group at
// rows.
void block_bases(const uint16_t* rows, int64_t k, int64_t c0, int64_t c1, uint8_t base[4]) {
  for (int j = 0; j < 4; ++j) {
    int b = 0;
    for (int64_t i = 4 * j; i < 4 * j + 4; ++i)
      for (int64_t c = c0; c < c1; ++c) b = std::max(b, (rows[i * k + c] >> 8) & 0x7F);
    base[j] = uint8_t(b);
  }
}

}  // namespace

void code_bf16_groups(const uint16_t* src, int64_t rows, int64_t k, int64_t g0, int64_t g1,
                      uint8_t* coded) {
  const int64_t gb = coded_group_bytes(k), hb = coded_header_bytes(k);
  Slot slots[kCodedRows][kCodedUnitCols];  // computed once: a load codes a billion weights
  for (int64_t i = 0; i < kCodedRows; ++i)
    for (int64_t o = 0; o < kCodedUnitCols; ++o) slots[i][o] = slot(i, o);
  for (int64_t g = g0; g < g1; ++g) {
    const uint16_t* w = src + g * kCodedRows * k;
    uint8_t* out = coded + g * gb;
    std::memset(out, 0, size_t(hb));
    uint32_t exceptions = 0;
    for (int64_t u = 0; u < k / kCodedUnitCols; ++u) {
      uint8_t* base = out + 4 * (u / kCodedBlockUnits);
      if (u % kCodedBlockUnits == 0)
        block_bases(w, k, u * kCodedUnitCols, std::min(k, (u + kCodedBlockUnits) * kCodedUnitCols),
                    base);
      uint8_t* unit = out + hb + u * kCodedUnitBytes;
      std::memset(unit, 0, size_t(kCodedUnitBytes));
      for (int64_t i = 0; i < kCodedRows; ++i)
        for (int64_t o = 0; o < kCodedUnitCols; ++o) {
          const uint16_t bits = w[i * k + u * kCodedUnitCols + o];
          int code = code_of(bits, base[i / 4]);
          const Slot s = slots[i][o];
          if (code < 0) {
            ++exceptions;
            code = kZeroCode;
          } else {
            unit[s.lo] = uint8_t(bits & 0xFF);
          }
          unit[s.code] |= uint8_t(s.high ? code << 4 : code);
        }
    }
    counts(coded, rows, k)[g] = exceptions;
  }
}

int64_t coded_exceptions_bytes(const uint8_t* coded, int64_t rows, int64_t k) {
  return (rows / kCodedRows + 1) * 4 +
         exception_total(coded, rows, k) * int64_t(sizeof(CodedException));
}

bool coded_too_irregular(const uint8_t* coded, int64_t rows, int64_t k) {
  // 1/32: the copy would be 1.5 + 0.25 bytes a weight.
  return exception_total(coded, rows, k) * 32 > rows * k;
}

void code_bf16_exceptions(const uint16_t* src, int64_t rows, int64_t k, const uint8_t* coded,
                          int64_t g0, int64_t g1, uint8_t* exc) {
  const int64_t groups = rows / kCodedRows, gb = coded_group_bytes(k);
  const uint32_t* n = counts(coded, rows, k);
  auto* off = reinterpret_cast<uint32_t*>(exc);
  auto* list = reinterpret_cast<CodedException*>(exc + (groups + 1) * 4);
  uint32_t at = 0;
  for (int64_t g = 0; g < g0; ++g) at += n[g];
  for (int64_t g = g0; g < g1; ++g) {
    off[g] = at;
    // Never more than the coded pass counted (the copy was sized so), even were the rows to change
    // in between (a checkpoint rewritten while it loads); any short list is padded with nothing.
    const uint32_t end = at + n[g];
    const uint8_t* bases = coded + g * gb;
    const uint16_t* w = src + g * kCodedRows * k;
    // Column order, then row: the order the matmuls add them in.
    for (int64_t c = 0; c < k && at < end; ++c)
      for (int64_t i = 0; i < kCodedRows && at < end; ++i) {
        const uint16_t bits = w[i * k + c];
        if (code_of(bits, bases[4 * (c / kCodedBlockCols) + i / 4]) >= 0) continue;
        const uint32_t f = uint32_t(bits) << 16;
        float v;
        std::memcpy(&v, &f, 4);
        list[at++] = {uint32_t(c * kCodedRows + i), v};
      }
    for (; at < end; ++at) list[at] = {0, 0.f};
  }
  if (g1 == groups) off[groups] = at;
}

CodedBf16 coded_bf16_view(const void* coded, const void* exc, int64_t rows) {
  CodedBf16 v;
  v.groups = static_cast<const uint8_t*>(coded);
  v.exc_off = static_cast<const uint32_t*>(exc);
  v.exc = reinterpret_cast<const CodedException*>(static_cast<const uint8_t*>(exc) +
                                                  (rows / kCodedRows + 1) * 4);
  return v;
}

// A product and a sum, not std::fma: a library call where the build has no FMA (half a percent of
// a heavy-tailed matrix's weights are exceptions).
void add_coded_exceptions(const CodedBf16& w, int64_t r0, int64_t r1, const float* x, int64_t ldx,
                          int T, float* y, int64_t ldy) {
  const CodedException* e = w.exc + w.exc_off[r0 / kCodedRows];
  for (int64_t g = r0 / kCodedRows; g < r1 / kCodedRows; ++g)
    for (const CodedException* ge = w.exc + w.exc_off[g + 1]; e < ge; ++e) {
      const int64_t c = e->pos / kCodedRows, row = g * kCodedRows + e->pos % kCodedRows - r0;
      for (int t = 0; t < T; ++t) y[t * ldy + row] += x[t * ldx + c] * e->w;
    }
}

void decode_bf16_coded_scalar(const uint8_t* group, int64_t k, uint16_t* packed) {
  const int64_t hb = coded_header_bytes(k);
  for (int64_t u = 0; u < k / kCodedUnitCols; ++u) {
    const uint8_t* unit = group + hb + u * kCodedUnitBytes;
    const uint8_t* base = group + 4 * (u / kCodedBlockUnits);
    for (int64_t i = 0; i < kCodedRows; ++i)
      for (int64_t o = 0; o < kCodedUnitCols; ++o) {
        const Slot s = slot(i, o);
        const int code = s.high ? unit[s.code] >> 4 : unit[s.code] & 15;
        const int64_t c = u * kCodedUnitCols + o;
        packed[packed_index(i, c)] =
            uint16_t(coded_table_entry(base[i / 4], code) << 8 | unit[s.lo]);
      }
  }
}

void decode_bf16_rows(DecodeCodedFn decode, const CodedBf16& w, int64_t k, int64_t r0, int64_t n,
                      uint16_t* packed) {
  const int64_t gb = coded_group_bytes(k);
  for (int64_t g = r0 / kCodedRows; g < (r0 + n) / kCodedRows; ++g) {
    uint16_t* out = packed + (g * kCodedRows - r0) * k;
    decode(w.groups + g * gb, k, out);
    for (uint32_t e = w.exc_off[g]; e < w.exc_off[g + 1]; ++e) {
      const int64_t c = w.exc[e].pos / kCodedRows, i = w.exc[e].pos % kCodedRows;
      uint32_t f;
      std::memcpy(&f, &w.exc[e].w, 4);
      out[packed_index(i, c)] = uint16_t(f >> 16);
    }
  }
}

// The coded matmul's sum, the contract every ISA's kernel meets bit for bit: per row and token,
// the products summed in column order by FMAs (as the packed kernels sum); exceptions (zero here)
// are added by the caller (add_coded_exceptions).
void matmul_bf16_coded_scalar(const MatmulArgs& a) {
  const auto* groups = static_cast<const uint8_t*>(a.w_il);
  const int64_t gb = coded_group_bytes(a.k);
  auto* lines = reinterpret_cast<uint16_t*>(a.scratch);
  for (int64_t r = a.r0; r < a.r1; r += kCodedRows) {
    decode_bf16_coded_scalar(groups + r / kCodedRows * gb, a.k, lines);
    for (int t = 0; t < a.n_tokens; ++t)
      for (int64_t i = 0; i < kCodedRows; ++i) {
        float sum = 0;
        for (int64_t c = 0; c < a.k; ++c) {
          const uint32_t bits = uint32_t(lines[packed_index(i, c)]) << 16;
          float w;
          std::memcpy(&w, &bits, 4);
          sum = std::fma(w, a.x[t * a.ldx + c], sum);
        }
        a.y[t * a.ldy + (r - a.r0) + i] = sum;
      }
  }
}

}  // namespace hearth::cpu
