// Shared pieces of the Q8/Q4 matmul kernels (layout of the weights in quant/FORMAT.md).
//
// Decode (few tokens): activations are quantized to int8 per 32-element block (scale amax / 127)
// and multiplied against the weight codes in integer arithmetic; each block's integer dot is then
// scaled by (activation scale * weight scale). Prefill (many tokens): weight tiles are dequantized
// once per tile and reused by every token of the tile.
//
// Only plain declarations here: this header is included by files built for different ISAs, and an
// inline function compiled with AVX-512 in one of them could be the copy the linker keeps.
#pragma once
#include <cstdint>

#include "backends/cpu/kernels.h"

namespace hearth::cpu::qk {

constexpr int64_t kBlock = 32;      // activation block = smallest weight group
constexpr int kTokenTile = 32;      // tokens quantized / converted together
constexpr int kRowTile = 16;        // weight rows dequantized together for prefill
constexpr int kPrefillTokens = 8;   // from this many tokens on, SIMD kernels take the tile path

// Activations of one token tile: codes [n][k], block scales and block code sums [n][k / 32].
struct ActTile {
  int8_t* q;
  float* d;
  float* s;
};

// Carves an ActTile for kTokenTile tokens from the front of scratch; returns the rest.
float* carve_act_tile(float* scratch, int64_t k, ActTile* t);
// Portable activation quantization (block scale amax / 127, codes round-to-nearest-even).
void quantize_act_scalar(const float* x, int64_t k, int8_t* q, float* d, float* s);

}  // namespace hearth::cpu::qk
