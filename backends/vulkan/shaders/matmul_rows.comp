#version 450
// out[t, u1 + n] = sum_k a[t, k] W[n, k] (as matmul.comp) with one invocation per output column n
// (x) for four token rows (4 y): no shared memory and no barriers, for short rows (K < 256),
// where splitting k over a workgroup costs more in reductions than it saves.
#include "common.glsl"
layout(local_size_x = 64) in;
void main() {
  const uint n = gl_GlobalInvocationID.x, t0 = gl_WorkGroupID.y * 4u, K = pc.cols;
  if (n >= pc.n) return;
  float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
  for (uint k = 0u; k < K; ++k) {
    const float w = w_rc(n, k);
    for (uint j = 0u; j < 4u; ++j)
      if (t0 + j < pc.rows) acc[j] += w * a_f[(t0 + j) * K + k];
  }
  for (uint j = 0u; j < 4u; ++j)
    if (t0 + j < pc.rows) out_f[(t0 + j) * pc.u2 + pc.u1 + n] = acc[j];
}
