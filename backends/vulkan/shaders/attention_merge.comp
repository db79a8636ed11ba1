#version 450
// The parts of a split attention (attention.comp) merged: a workgroup per (x = head, y = row)
// reads the pc.u1 partial softmaxes [rows][heads][parts][head_dim + 2] from a_f, rescales each to
// the largest maximum and writes sum(values) / sum(sums). pc.n = query heads, u0 = head_dim.
#include "common.glsl"
layout(local_size_x = 64) in;
void main() {
  const uint lid = gl_LocalInvocationID.x, h = gl_WorkGroupID.x, r = gl_WorkGroupID.y;
  const uint hd = pc.u0, parts = pc.u1, stride = hd + 2u;
  const uint base = (r * pc.n + h) * parts * stride;
  float m = -1.0 / 0.0;
  for (uint s = 0u; s < parts; ++s)
    if (a_f[base + s * stride + hd + 1u] > 0.0) m = max(m, a_f[base + s * stride + hd]);
  float l = 0.0;
  float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
  for (uint s = 0u; s < parts; ++s) {
    const uint at = base + s * stride;
    const float ls = a_f[at + hd + 1u];
    if (!(ls > 0.0)) continue;  // an empty part
    const float f = exp(a_f[at + hd] - m);
    l += ls * f;
    for (uint j = 0u; j < 4u; ++j) {
      const uint d = lid + 64u * j;
      if (d < hd) acc[j] += a_f[at + d] * f;
    }
  }
  for (uint j = 0u; j < 4u; ++j) {
    const uint d = lid + 64u * j;
    if (d < hd) out_f[(r * pc.n + h) * hd + d] = acc[j] / l;
  }
}
