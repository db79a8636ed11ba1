#version 450
// out[r] = a[r] / sqrt(mean(a[r]^2) + eps) * w, rows of pc.cols floats, w of pc.cols values;
// a per-head norm is the same over rows of head_dim. One workgroup per row; may run in place.
#include "common.glsl"
layout(local_size_x = 64) in;
shared float partial[64];
void main() {
  const uint r = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x, lid = gl_LocalInvocationID.x;
  if (r >= pc.rows) return;
  const uint base = r * pc.cols;
  float ss = 0.0;
  for (uint i = lid; i < pc.cols; i += 64u) ss += a_f[base + i] * a_f[base + i];
  partial[lid] = ss;
  barrier();
  for (uint s = 32u; s > 0u; s >>= 1) {
    if (lid < s) partial[lid] += partial[lid + s];
    barrier();
  }
  const float inv = inversesqrt(partial[0] / float(pc.cols) + pc.f0);
  for (uint i = lid; i < pc.cols; i += 64u) out_f[base + i] = a_f[base + i] * inv * w_at(i);
}
