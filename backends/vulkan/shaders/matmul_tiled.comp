#version 450
// out[t, u1 + n] = sum_k a[t, k] W[n, k] (as matmul.comp) for long steps (prefill): a workgroup
// computes a tile of 32 token rows (y) by 32 output columns (x), staging 32-wide slices of k of
// both in shared memory (the weight widened to f32 there, whatever its type), so each element of
// a and W is read once per tile instead of once per four rows; each of the 256 invocations sums
// four outputs in k order.
#include "common.glsl"
layout(local_size_x = 256) in;
shared float a_tile[32][33];  // [token row][k], padded against bank conflicts
shared float w_tile[32][33];  // [output column][k]
void main() {
  const uint lid = gl_LocalInvocationID.x, K = pc.cols;
  const uint n0 = gl_WorkGroupID.x * 32u, t0 = gl_WorkGroupID.y * 32u;
  const uint tx = lid % 16u, ty = lid / 16u;  // outputs (t0 + ty + 16 i, n0 + tx + 16 j)
  float acc[2][2] = float[2][2](float[2](0.0, 0.0), float[2](0.0, 0.0));
  for (uint k0 = 0u; k0 < K; k0 += 32u) {
    for (uint e = lid; e < 1024u; e += 256u) {
      const uint r = e / 32u, k = e % 32u;
      const bool in_k = k0 + k < K;
      a_tile[r][k] = in_k && t0 + r < pc.rows ? a_f[(t0 + r) * K + k0 + k] : 0.0;
      w_tile[r][k] = in_k && n0 + r < pc.n ? w_rc(n0 + r, k0 + k) : 0.0;
    }
    barrier();  // the slice is staged
    const uint kn = min(32u, K - k0);
    for (uint k = 0u; k < kn; ++k)
      for (uint i = 0u; i < 2u; ++i)
        for (uint j = 0u; j < 2u; ++j) acc[i][j] += a_tile[ty + 16u * i][k] * w_tile[tx + 16u * j][k];
    barrier();  // every invocation is done with the slice before the next is staged
  }
  for (uint i = 0u; i < 2u; ++i)
    for (uint j = 0u; j < 2u; ++j) {
      const uint t = t0 + ty + 16u * i, n = n0 + tx + 16u * j;
      if (t < pc.rows && n < pc.n) out_f[t * pc.u2 + pc.u1 + n] = acc[i][j];
    }
}
