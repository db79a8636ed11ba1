#version 450
// Rotate-half RoPE: each row of pc.cols floats holds pc.n heads of head_dim = 2 * pc.u0; pair i of
// head h turns by the row's angle i (rope_f: per row, u0 pairs of cos, sin). a -> out, may be the
// same buffer.
#include "common.glsl"
layout(local_size_x = 64) in;
void main() {
  const uint half_dim = pc.u0, i = gl_GlobalInvocationID.x % half_dim;
  const uint h = gl_GlobalInvocationID.x / half_dim, r = gl_GlobalInvocationID.y;
  if (h >= pc.n || r >= pc.rows) return;
  const uint b = r * pc.cols + h * 2u * half_dim;
  const float c = rope_f[(r * half_dim + i) * 2u], s = rope_f[(r * half_dim + i) * 2u + 1u];
  const float x0 = a_f[b + i], x1 = a_f[b + i + half_dim];
  out_f[b + i] = x0 * c - x1 * s;
  out_f[b + i + half_dim] = x1 * c + x0 * s;
}
