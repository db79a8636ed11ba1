#version 450
// Each step row's activations to int8 per block of 32 for the integer-dot mat-vec, as the CPU
// kernels quantize them (quant/FORMAT.md): codes x * (127 / amax) rounded to nearest even, the
// block scale amax / 127 and the codes' sum, laid out as act_i8_* say (common.glsl). An invocation
// per block (x) of each row (y).
#define HEARTH_OUT_UINT
#include "common.glsl"
layout(local_size_x = 64) in;
void main() {
  const uint K = pc.cols, b = gl_GlobalInvocationID.x, t = gl_WorkGroupID.y;
  if (b >= K / 32u || t >= pc.rows) return;
  const uint base = t * K + 32u * b;
  float amax = 0.0;
  bool finite = true;
  for (uint i = 0u; i < 32u; ++i) {
    const float x = a_f[base + i];
    finite = finite && !isnan(x) && !isinf(x);
    amax = max(amax, abs(x));
  }
  // A NaN or infinite input makes the block's scale NaN, so every dot it enters is NaN, as in
  // float arithmetic and on the CPU (and no NaN reaches an integer conversion).
  // Below 7.5e-37 (about 2^-120) the block counts as zeros, as on CUDA: 127 / amax nears the f32
  // range (the CPU's conversions of an infinite product happen to give 0; a shader's are
  // undefined).
  const float inv = finite && amax >= 7.5e-37 ? 127.0 / amax : 0.0;
  int sum = 0;
  for (uint w = 0u; w < 8u; ++w) {
    uint word = 0u;
    for (uint e = 0u; e < 4u; ++e) {
      const int q = finite ? int(roundEven(a_f[base + 4u * w + e] * inv)) : 0;
      sum += q;
      word |= uint(q & 0xff) << (8u * e);
    }
    out_u[base / 4u + w] = word;
  }
  out_u[act_i8_scale(t, b)] = finite ? floatBitsToUint(amax / 127.0) : 0x7fc00000u;
  out_u[act_i8_sum(t, b)] = uint(sum);
}
