// Shared pieces of the Q8/Q4 matmul kernels (layout of the weights in quant/FORMAT.md).
//
// Decode (few tokens): activations are quantized to int8 per 32-element block (scale amax / 127)
// and stored in the weights' slot order, so byte j of an activation chunk meets byte j of a Q8
// chunk (or nibble j of a Q4 chunk). Every 4-byte lane of a vpdpbusd / maddubs result then sums
// elements of one block, block (lane mod 4), and is scaled by (activation scale * weight scale)
// with one 4-float broadcast. Prefill (many tokens) on AVX-512 and AVX-VNNI: the same int8
// activations, in element order, against panels of rows repacked once and reused by every token.
//
// Only plain declarations here: this header is included by files built for different ISAs, and an
// inline function compiled with AVX-512 in one of them could be the copy the linker keeps.
#pragma once
#include <cstdint>

#include "backends/cpu/kernels.h"

namespace hearth::cpu::qk {

constexpr int64_t kBlock = 32;                       // activation block = smallest weight group
constexpr int64_t kChunk = 128;                      // 4 blocks: the unit of the slot order
constexpr int kTokenTile = 32;                       // tokens quantized together on the int8 path
constexpr int kPrefillTokens = kQuantGemmMinTokens;  // the int8 GEMM path from here on
static_assert(kPrefillTokens <= kTokenTile, "decode_quant quantizes a step's tokens at once");

// Activations of one token tile: codes [n][k] in slot order, block scales and block code sums
// [n][k / 32] in block order.
struct ActTile {
  int8_t* q;
  float* d;
  float* s;
};

// The int8 activations of a step's n tokens for the panel kernels (q4_panel.h, q8_panel.h), in
// element order (KernelTable::quant_act), block-interleaved: block b of every token together, so
// that a kernel reaches each of its tokens' codes at a fixed offset from one pointer (with a
// pointer per token, 8 tokens' addresses spilled from the 16 general registers).
struct PanelActs {
  const int8_t* q;     // [k / 32][n][32] codes
  const float* d;      // [k / 32][n] block scales
  const int32_t* sum;  // [k / 32][n] block code sums
  int64_t k, n;
  const int8_t* codes(int64_t t, int64_t b) const { return q + (b * n + t) * kBlock; }
  float scale(int64_t t, int64_t b) const { return d[b * n + t]; }
  int32_t code_sum(int64_t t, int64_t b) const { return sum[b * n + t]; }
};

// Carves an ActTile for kTokenTile tokens from the front of scratch; returns the rest.
float* carve_act_tile(float* scratch, int64_t k, ActTile* t);
// Portable activation quantization (scale amax / 127, codes rounded to nearest even), slot order.
void quantize_act_scalar(const float* x, int64_t k, int8_t* q, float* d, float* s);
// Integer dots of one chunk of m < 4 blocks (a row's short last chunk) per block: codes as the
// unsigned values the SIMD loops use (Q4: q + 8; Q8: q + 128), activations in slot order.
void tail_block_dots(int bits, const uint8_t* w_chunk, const int8_t* x_chunk, int m, int32_t* isum);
// The same for Q4 codes that index a codebook: each nibble i counts as lut[i] (a level + 128).
void tail_block_dots_lut(const uint8_t* w_chunk, const int8_t* x_chunk, int m, const uint8_t* lut,
                         int32_t* isum);

// The portable QuantDequantFn (quant::dequantize_row row by row).
void dequant_rows_scalar(const Tensor& w, int64_t r0, int64_t n, void* dst, bool bf16);
// The portable QuantMatmulFn for weights of `type` (Q8 or Q4, with a.codebook when it has one):
// each row dequantized once into scratch, exactly as the embedding lookup does, then dotted with
// every token. This is the "dequantize then multiply" the SIMD kernels are checked against.
void matmul_dequant_scalar(const QuantMatmulArgs& a, DType type);

}  // namespace hearth::cpu::qk
