#version 450
// The index of each output row's largest logit (a workgroup per row of pc.cols floats), written as
// an int to out_f's bits: first index on ties, NaN ignored, -1 when no logit is above -inf.
#include "common.glsl"
layout(local_size_x = 256) in;
shared float best_v[256];
shared int best_i[256];
void main() {
  const uint lid = gl_LocalInvocationID.x, r = gl_WorkGroupID.x;
  float bv = -1.0 / 0.0;
  int bi = -1;
  for (uint c = lid; c < pc.cols; c += 256u) {
    const float v = a_f[r * pc.cols + c];
    if (v > bv) bv = v, bi = int(c);  // NaN compares false; strict keeps the first index
  }
  best_v[lid] = bv;
  best_i[lid] = bi;
  barrier();
  for (uint s = 128u; s > 0u; s >>= 1) {
    if (lid < s) {
      const float ov = best_v[lid + s];
      const int oi = best_i[lid + s];
      if (oi >= 0 && (best_i[lid] < 0 || ov > best_v[lid] || (ov == best_v[lid] && oi < best_i[lid]))) {
        best_v[lid] = ov;
        best_i[lid] = oi;
      }
    }
    barrier();
  }
  if (lid == 0u) out_f[r] = intBitsToFloat(best_i[0]);
}
