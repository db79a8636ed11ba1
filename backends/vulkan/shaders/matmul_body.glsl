// out[t, n] = sum_k a[t, k] W[n, k]: a [rows, cols] f32, W [pc.n, cols] in w_words (any weight type);
// the output row has pc.u2 columns, of which this dispatch writes [u1, u1 + n) (a weight in parts).
// A workgroup owns output columns n = x, x + groups_x, ... for four token rows from 4 y: its 64
// threads split k, so each weight row is read once per four tokens. The 64 partial sums of each
// row are reduced in shared memory, or with HEARTH_SUBGROUP first within each subgroup
// (subgroupAdd) and then across the workgroup's subgroups. With HEARTH_DOT, Q8 and Q4 weights
// are multiplied on integer dot products instead (accumulate_dots).
#include "common.glsl"
layout(local_size_x = 64) in;
shared float partial[4][64];

#ifdef HEARTH_DOT
// Q8 and Q4 rows against the int8 activations (binding 2) on integer dot products: each invocation
// takes pieces of four code words, a Q8 half-block (16 codes) or a Q4 block (32 nibbles), and adds
// each piece's exact integer dot times the activations' block scale and the row's group scale.
// Q4 nibbles hold q + 8: the dot of the unsigned nibbles, less 8 times the activations' code sum.
void accumulate_dots(uint n, uint t0, inout float acc[4]) {
  // a0: the int8 row of this dispatch's row 0 (a part of the logits' rows starts past it).
  const uint K = pc.cols, lid = gl_LocalInvocationID.x, a0 = pc.u0;
  const bool q8 = pc.wtype == kQ8;
  const uint pieces = q8 ? K / 16u : K / 32u;
  for (uint p = lid; p < pieces; p += 64u) {
    const uint b = q8 ? p >> 1 : p, h = q8 ? p & 1u : 0u;
    // The piece's chunk of 128 (m blocks: the last of a row may be short) and block within it.
    const uint c0 = (32u * b) & ~127u, m = min(K - c0, 128u) / 32u, bc = b - c0 / 32u;
    const float ws = half_to_float(s_half(n * (K / pc.group) + 32u * b / pc.group), pc.stype);
    int isum[4] = int[4](0, 0, 0, 0);
    for (uint q = 0u; q < 4u; ++q) {
      // Slot word m q + bc of half h holds elements 32 bc + 16 h + 4 q .. + 3 (common.glsl w_rc).
      const uint aw = (c0 + 32u * bc + 16u * h + 4u * q) / 4u;
      if (q8) {
        const uint w = w_words[(n * K + c0 + 16u * m * h) / 4u + m * q + bc];
        for (uint j = 0u; j < 4u; ++j)
          if (t0 + j < pc.rows) isum[j] += dot_ss(b_u[(a0 + t0 + j) * (K / 4u) + aw], w);
      } else {
        const uint w = w_words[(n * K / 2u + c0 / 2u) / 4u + m * q + bc];
        const uint lo = w & 0x0f0f0f0fu, hi = (w >> 4) & 0x0f0f0f0fu;
        for (uint j = 0u; j < 4u; ++j)
          if (t0 + j < pc.rows) {
            const uint a = (a0 + t0 + j) * (K / 4u) + aw;
            isum[j] += dot_su(b_u[a], lo) + dot_su(b_u[a + 4u], hi);
          }
      }
    }
    for (uint j = 0u; j < 4u; ++j)
      if (t0 + j < pc.rows) {
        const int s = q8 ? isum[j] : isum[j] - 8 * int(b_u[act_i8_sum(a0 + t0 + j, b)]);
        acc[j] += float(s) * uintBitsToFloat(b_u[act_i8_scale(a0 + t0 + j, b)]) * ws;
      }
  }
}
#endif
void main() {
  const uint lid = gl_LocalInvocationID.x, t0 = gl_WorkGroupID.y * 4u, K = pc.cols;
  for (uint n = gl_WorkGroupID.x; n < pc.n; n += gl_NumWorkGroups.x) {
    float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
#ifdef HEARTH_DOT
    accumulate_dots(n, t0, acc);
#else
    for (uint k = lid; k < K; k += 64u) {
      const float w = w_rc(n, k);
      for (uint j = 0u; j < 4u; ++j)
        if (t0 + j < pc.rows) acc[j] += w * a_f[(t0 + j) * K + k];
    }
#endif
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
