// The CUDA kernels' index and number math as __host__ __device__ functions, so that the tests run
// them on the CPU (tests/test_cuda_math.cpp) against quant::dequantize_row and float64 even where
// no GPU is: the 16-byte weight pieces a mat-vec lane reads and the columns they hold, 16-bit
// conversions, the paged-KV address, the split of attention over positions and the merge of its
// partial softmaxes, the argmax order. Weights are read as their checkpoint stores them: F32,
// F16, BF16, or the Q8/Q4 codes of quant/FORMAT.md with F16/BF16 group scales.
#pragma once
// The backend's namespace: hearth::cuda, or another where the tests compile these files for the
// CPU emulation beside the real ones (tests/cuda_emu_prelude.h).
#ifndef HEARTH_CUDA_NS
#define HEARTH_CUDA_NS cuda
#endif
#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define HEARTH_HD __host__ __device__ __forceinline__
#else
#define HEARTH_HD inline
#endif

namespace hearth::HEARTH_CUDA_NS {

enum WType : uint32_t { kF32, kF16, kBF16, kQ8, kQ4, kQ4Codebook };

HEARTH_HD float f32_from_bits(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

HEARTH_HD uint32_t bits_of_f32(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}

HEARTH_HD float neg_inf() {
  return f32_from_bits(0xff800000u);
}

HEARTH_HD float bf16_to_f32(uint32_t h) {
  return f32_from_bits(h << 16);
}

HEARTH_HD float f16_to_f32(uint32_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1fu) return f32_from_bits(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {  // zero or subnormal: man * 2^-24, exact in f32
    const float f = float(man) * 5.9604644775390625e-8f;
    return sign ? -f : f;
  }
  return f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

// Round to nearest even; NaN stays NaN (as core/dtype.h).
HEARTH_HD uint32_t f32_to_bf16(float f) {
  const uint32_t u = bits_of_f32(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}

// Round to nearest even, overflow to infinity, subnormals kept (as core/dtype.cpp).
HEARTH_HD uint32_t f32_to_f16(float f) {
  const uint32_t u = bits_of_f32(f), sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;
  if (a >= 0x477ff000u) return sign | 0x7c00u;
  if (a < 0x38800000u) {
    if (a < 0x33000000u) return sign;
    const uint32_t m = (a & 0x7fffffu) | 0x800000u, shift = 126u - (a >> 23);
    const uint32_t half = 1u << (shift - 1), rem = m & ((1u << shift) - 1);
    uint32_t r = m >> shift;
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return sign | r;
  }
  return sign | ((a + 0xfffu + ((a >> 13) & 1u) - 0x38000000u) >> 13);
}

HEARTH_HD float half_to_f32(uint32_t h, uint32_t type) {
  return type == kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

// A weight [rows, cols] as the kernels read it; codes and scales are device pointers on the GPU.
struct WeightView {
  const uint8_t* codes = nullptr;   // row-major: F32/F16/BF16 values or Q8/Q4 codes
  const uint8_t* scales = nullptr;  // Q8/Q4: [rows, cols / group] of stype
  int64_t cols = 0;
  uint32_t type = kF32, stype = kF16, group = 32;
  int8_t codebook[16] = {};  // kQ4Codebook: the level of each nibble
};

HEARTH_HD int64_t row_bytes(const WeightView& w) {
  switch (w.type) {
    case kF32:
      return w.cols * 4;
    case kF16:
    case kBF16:
      return w.cols * 2;
    case kQ8:
      return w.cols;
    default:
      return w.cols / 2;
  }
}

HEARTH_HD uint32_t load_u16(const uint8_t* p) {
  return uint32_t(p[0]) | (uint32_t(p[1]) << 8);
}

HEARTH_HD float scale_at(const WeightView& w, int64_t row, int64_t col) {
  const int64_t i = row * (w.cols / w.group) + col / w.group;
  return half_to_f32(load_u16(w.scales + 2 * i), w.stype);
}

// A Q4 nibble's value: nibble - 8 on the uniform grid, else the codebook's level.
HEARTH_HD float q4_level(const WeightView& w, uint32_t nib) {
  return w.type == kQ4 ? float(int(nib) - 8) : float(w.codebook[nib]);
}

// Element (row, col) of any weight type. Quantized codes sit in chunks of 128 elements (the last
// of a row may hold m = 1..3 blocks of 32): element 32b + 16h + 4q + e of a chunk is slot
// 4(m q + b) + e of half h (quant/FORMAT.md).
HEARTH_HD float weight_at(const WeightView& w, int64_t row, int64_t col) {
  const uint8_t* r = w.codes + row * row_bytes(w);
  switch (w.type) {
    case kF32: {
      uint32_t u;
      std::memcpy(&u, r + 4 * col, 4);
      return f32_from_bits(u);
    }
    case kF16:
    case kBF16:
      return half_to_f32(load_u16(r + 2 * col), w.type);
    default:
      break;
  }
  const int64_t c0 = col & ~int64_t(127);
  const int64_t m = (w.cols - c0 < 128 ? w.cols - c0 : 128) / 32, x = col - c0;
  const int64_t h = (x & 31) >> 4, slot = 4 * (m * ((x & 15) >> 2) + (x >> 5)) + (x & 3);
  float q;
  if (w.type == kQ8)
    q = float(int8_t(r[c0 + 16 * m * h + slot]));
  else
    q = q4_level(w, (r[c0 / 2 + slot] >> (4 * h)) & 15u);
  return q * scale_at(w, row, col);
}

// The fast mat-vec reads each row in 16-byte pieces (piece j: bytes [16 j, 16 j + 16) of the
// row's codes), which needs rows of whole pieces.
HEARTH_HD bool piecewise(const WeightView& w) {
  return w.type >= kQ8 ? w.cols % 32 == 0 : row_bytes(w) % 16 == 0;
}

HEARTH_HD int64_t pieces_per_row(const WeightView& w) {
  return row_bytes(w) / 16;
}

// A piece holds runs of four consecutive columns: F32 one, F16/BF16 two, Q8 four (one per 32-bit
// word), Q4 eight (the low nibbles of word i, then the high ones). The first column of run i.
HEARTH_HD int64_t run_col(const WeightView& w, int64_t piece, int i) {
  const int64_t b = 16 * piece;  // the piece's first byte in its row
  switch (w.type) {
    case kF32:
      return b / 4;
    case kF16:
    case kBF16:
      return b / 2 + 4 * i;
    default:
      break;
  }
  // Q8: a chunk is 128 bytes, each half 16 m; Q4: 64 bytes, the halves in the nibbles.
  const int64_t chunk_bytes = w.type == kQ8 ? 128 : 64;
  const int64_t c0 = b / chunk_bytes * 128;
  const int64_t m = (w.cols - c0 < 128 ? w.cols - c0 : 128) / 32;
  int64_t in = b - c0 * chunk_bytes / 128;  // bytes into the chunk
  int64_t h;
  if (w.type == kQ8) {
    h = in / (16 * m);
    in -= 16 * m * h;
  } else {
    h = i / 4;
    i %= 4;
  }
  const int64_t g = in / 4 + i;  // slot group: q = g / m, block = g % m
  return c0 + 32 * (g % m) + 16 * h + 4 * (g / m);
}

HEARTH_HD int runs_per_piece(const WeightView& w) {
  return w.type == kF32 ? 1 : w.type <= kBF16 ? 2 : w.type == kQ8 ? 4 : 8;
}

// The four values of run i of a piece whose 16 bytes are `words` (little-endian), before the
// group scale (codes as levels); quantized runs lie within one group, so one scale serves them.
HEARTH_HD void run_values(const WeightView& w, const uint32_t words[4], int i, float v[4]) {
  switch (w.type) {
    case kF32:
      for (int e = 0; e < 4; ++e) v[e] = f32_from_bits(words[e]);
      return;
    case kF16:
    case kBF16:
      for (int e = 0; e < 4; ++e)
        v[e] = half_to_f32((words[2 * i + e / 2] >> (16 * (e & 1))) & 0xffffu, w.type);
      return;
    case kQ8:
      for (int e = 0; e < 4; ++e) v[e] = float(int8_t((words[i] >> (8 * e)) & 0xffu));
      return;
    default:
      for (int e = 0; e < 4; ++e) v[e] = q4_level(w, (words[i % 4] >> (8 * e + 4 * (i / 4))) & 15u);
      return;
  }
}

// Decode's int8 activations (CudaOptions::int8_dots), rounded as the CPU kernels round them
// (quant/FORMAT.md): per block of 32, codes x * (127 / amax) to nearest even and the scale
// amax / 127; a block with a NaN or infinity gets scale NaN and codes 0, one whose amax is below
// 7.5e-37 (about 2^-120, where 127 / amax nears the f32 range) counts as zeros. Codes go to `codes`
// as 8 words of four (element order, lowest byte first).
HEARTH_HD float quantize_block_i8(const float* x, uint32_t codes[8]) {
  float amax = 0.f;
  bool finite = true;
  for (int i = 0; i < 32; ++i) {
    finite = finite && (bits_of_f32(x[i]) & 0x7f800000u) != 0x7f800000u;
    const float a = fabsf(x[i]);
    amax = a > amax ? a : amax;
  }
  const float inv = finite && amax >= 7.5e-37f ? 127.f / amax : 0.f;
  for (int w = 0; w < 8; ++w) {
    uint32_t word = 0;
    for (int e = 0; e < 4; ++e) {
      const int q = finite ? int(rintf(x[4 * w + e] * inv)) : 0;  // to nearest even
      word |= uint32_t(q & 0xff) << (8 * e);
    }
    codes[w] = word;
  }
  return finite ? amax / 127.f : f32_from_bits(0x7fc00000u);
}

// The dot product of two words of four signed bytes.
HEARTH_HD int32_t dot4_i8(uint32_t a, uint32_t b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 610
  return __dp4a(int(a), int(b), 0);
#else
  int32_t s = 0;
  for (int e = 0; e < 4; ++e) s += int32_t(int8_t(a >> (8 * e))) * int32_t(int8_t(b >> (8 * e)));
  return s;
#endif
}

// Four Q4 nibbles n (one per byte, 0..15) as the signed bytes n - 8: n ^ 8 sign-extended from its
// bit 3 (each byte's 0x08 times 30 is 0xf0, with no carry into the next byte).
HEARTH_HD uint32_t q4_centered(uint32_t n) {
  const uint32_t t = n ^ 0x08080808u;
  return t | ((t & 0x08080808u) * 30u);
}

// Run i's four codes of a Q8 or Q4 (uniform grid) piece as signed bytes (run_values as integers).
HEARTH_HD uint32_t run_codes_i8(const WeightView& w, const uint32_t words[4], int i) {
  if (w.type == kQ8) return words[i];
  return q4_centered((words[i % 4] >> (4 * (i / 4))) & 0x0f0f0f0fu);
}

// The paged KV cache of one layer: block b holds [kv head][block_size][head_dim] elements.
HEARTH_HD int64_t kv_index(int32_t block, int kv_head, int n_kv_heads, int pos_in_block,
                           int block_size, int head_dim) {
  return ((int64_t(block) * n_kv_heads + kv_head) * block_size + pos_in_block) * head_dim;
}

// Attention splits a row's positions [0, n) over up to `splits` parts of at least kMinSplit
// positions each: part s covers [*begin, *end) (empty past the last).
constexpr int kMinSplit = 32;
HEARTH_HD void split_range(int n, int splits, int s, int* begin, int* end) {
  int per = (n + splits - 1) / splits;
  if (per < kMinSplit) per = kMinSplit;
  const int b = s * per, e = b + per;
  *begin = b < n ? b : n;
  *end = e < n ? e : n;
}

// A softmax over part of the positions: its largest score m, the sum l of exp(score - m), and the
// weighted sum of values (kept by the caller) scaled by the same exp. Merging two: the one with
// the smaller maximum is rescaled. An empty part has m = -inf, l = 0.
struct SoftmaxPart {
  float m, l;
};
// The factors that bring a's and b's sums to their merged maximum.
HEARTH_HD void merge_factors(SoftmaxPart a, SoftmaxPart b, float* fa, float* fb, SoftmaxPart* out) {
  const float m = a.m > b.m ? a.m : b.m;
  if (m == neg_inf()) {
    *fa = *fb = 0.f;
    *out = {m, 0.f};
    return;
  }
  *fa = a.l > 0.f ? expf(a.m - m) : 0.f;
  *fb = b.l > 0.f ? expf(b.m - m) : 0.f;
  *out = {m, a.l * *fa + b.l * *fb};
}

// Whether (v, i) beats the best so far (bv, bi) in an argmax: the larger value, the lower index on
// ties; NaN never wins; bi < 0 means nothing yet (and a value must be above -inf to count).
HEARTH_HD bool argmax_beats(float v, int i, float bv, int bi) {
  if (i < 0 || !(v > neg_inf())) return false;
  return bi < 0 || v > bv || (v == bv && i < bi);
}

// The sampler's top-k (core/gpu_readback.h) as a radix select: a logit's key orders as the float
// does, with NaN ranked as -inf and -0 as +0 (the sampler turns NaN into -inf; -0 == +0 is a tie).
HEARTH_HD uint32_t top_k_key(float v) {
  uint32_t b = bits_of_f32(v);
  if ((b & 0x7fffffffu) > 0x7f800000u) b = 0xff800000u;  // NaN
  if (b == 0x80000000u) b = 0u;
  return (b & 0x80000000u) != 0u ? ~b : (b | 0x80000000u);
}
// One pass of the select: hist[d] counts the keys that match the digits fixed so far and have
// digit d next; `need` (>= 1, at most their sum) is how many of the largest are still to place.
// Returns the digit of the k-th largest key and takes the keys of the digits above it off need.
HEARTH_HD int radix_pick(const uint32_t* hist, uint32_t* need) {
  for (int d = 255; d > 0; --d) {
    if (hist[d] >= *need) return d;
    *need -= hist[d];
  }
  return 0;
}

}  // namespace hearth::HEARTH_CUDA_NS
