#version 450
// Elementwise over pc.rows x pc.cols: out = a + b (u0 = 0) or silu(a) * b (u0 = 1).
#include "common.glsl"
layout(local_size_x = 64) in;
void main() {
  const uint i = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
  if (i >= pc.rows * pc.cols) return;
  const float a = a_f[i], b = b_f[i];
  out_f[i] = pc.u0 == 0u ? a + b : a / (1.0 + exp(-a)) * b;
}
