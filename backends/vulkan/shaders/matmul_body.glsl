// out[t, n] = sum_k a[t, k] W[n, k]: a [rows, cols] f32, W [pc.n, cols] in w_words (any weight type);
// the output row has pc.u2 columns, of which this dispatch writes [u1, u1 + n) (a weight in parts).
// A workgroup owns output columns n = x, x + groups_x, ... for four token rows from 4 y: its 64
// threads split k, so each weight row is read once per four tokens. The 64 partial sums of each
// row are reduced in shared memory, or with HEARTH_SUBGROUP first within each subgroup
// (subgroupAdd) and then across the workgroup's subgroups.
#include "common.glsl"
layout(local_size_x = 64) in;
shared float partial[4][64];
void main() {
  const uint lid = gl_LocalInvocationID.x, t0 = gl_WorkGroupID.y * 4u, K = pc.cols;
  for (uint n = gl_WorkGroupID.x; n < pc.n; n += gl_NumWorkGroups.x) {
    float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
    for (uint k = lid; k < K; k += 64u) {
      const float w = w_rc(n, k);
      for (uint j = 0u; j < 4u; ++j)
        if (t0 + j < pc.rows) acc[j] += w * a_f[(t0 + j) * K + k];
    }
#ifdef HEARTH_SUBGROUP
    for (uint j = 0u; j < 4u; ++j) {
      const float s = subgroupAdd(acc[j]);
      if (subgroupElect()) partial[j][gl_SubgroupID] = s;
    }
    barrier();
    if (lid < 4u && t0 + lid < pc.rows) {
      float s = 0.0;
      for (uint g = 0u; g < gl_NumSubgroups; ++g) s += partial[lid][g];
      out_f[(t0 + lid) * pc.u2 + pc.u1 + n] = s;
    }
#else
    for (uint j = 0u; j < 4u; ++j) partial[j][lid] = acc[j];
    barrier();
    for (uint s = 32u; s > 0u; s >>= 1) {
      if (lid < s)
        for (uint j = 0u; j < 4u; ++j) partial[j][lid] += partial[j][lid + s];
      barrier();
    }
    if (lid < 4u && t0 + lid < pc.rows) out_f[(t0 + lid) * pc.u2 + pc.u1 + n] = partial[lid][0];
#endif
    barrier();
  }
}
