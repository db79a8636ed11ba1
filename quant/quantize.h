// Quantizing weights: one row at a time into the codes and scales of quant/FORMAT.md.
#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.h"
#include "core/quant_format.h"

namespace hearth::quant {

enum class Method {
  Rtn,     // round to nearest with the max-magnitude scale: the plain baseline
  Search,  // per group, the scale (clipping) minimising the importance-weighted squared error
};

// Quantizes n weights (n a multiple of s.group). `importance` (n values, or null for all ones)
// weighs each element's squared error; with calibration it is E[x^2] of the element's input
// channel, which turns the weight error into the layer's expected output error. Writes n codes
// (in [-8, 7] or [-127, 127]) and n / group scales as stored (F16 or BF16 bits); the codes are
// rounded against the stored scale, so dequantizing gives exactly what the search scored.
// `codebook` (4 bits only; 16 increasing int8 levels, or null for the uniform grid): code q then
// stands for codebook[q + 8] times the scale, and each weight takes the nearest level.
void quantize_row(const float* w, int64_t n, const Scheme& s, Method m, const float* importance,
                  int8_t* q, uint16_t* scales, const int8_t* codebook = nullptr);

// The 16 levels of a 4-bit codebook fitted to weights w (n a multiple of group): Lloyd-Max on the
// values w / d, d each group's round-to-nearest scale (its largest-magnitude weight maps to -127,
// which stays a level), weighted by d^2 so the fit minimises squared error in weight units.
// Deterministic; returns strictly increasing levels in [-127, 127].
void fit_codebook(const float* w, int64_t n, int group, int8_t* levels);

}  // namespace hearth::quant
