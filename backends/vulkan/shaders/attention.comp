#version 450
// Causal GQA attention of one step row's query head over its part of positions [0, pos] of its
// sequence in the paged cache (kv_store.comp's layout, any pc.kvtype): a workgroup each, x = head,
// y = row, z = part of gl_NumWorkGroups.z (flash-decoding; parts of at least 32 positions, empty
// past the last). Scores of 64 positions at a time go to shared memory; the running maximum and
// sum merge the tiles exactly (online softmax), and each thread keeps head_dim / 64 output
// elements. One part writes the output; several write their partial softmaxes to out_f instead
// ([rows][heads][parts][head_dim + 2]: the weighted values, the maximum, the sum) for
// attention_merge.comp. pc.n = query heads, u0 = head_dim (<= 256), u1 = block_size,
// u2 = kv heads, f0 = 1/sqrt(head_dim).
#include "common.glsl"
layout(local_size_x = 64) in;
shared float q[256];
shared float score[64];
shared float red[64];
void main() {
  const uint lid = gl_LocalInvocationID.x, h = gl_WorkGroupID.x, r = gl_WorkGroupID.y;
  const uint part = gl_WorkGroupID.z, parts = gl_NumWorkGroups.z;
  const uint hd = pc.u0, bs = pc.u1, nkv = pc.u2, kh = h / (pc.n / nkv);
  const uint width = pc.n * hd, n_pos = step_pos(r) + 1u, table = step_table(r);
  const uint per = max((n_pos + parts - 1u) / parts, 32u);
  const uint p_begin = min(part * per, n_pos), p_end = min(p_begin + per, n_pos);
  for (uint d = lid; d < hd; d += 64u) q[d] = a_f[r * width + h * hd + d];
  barrier();
  float m = -1.0 / 0.0, l = 0.0;
  float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
  for (uint p0 = p_begin; p0 < p_end; p0 += 64u) {
    const uint p = p0 + lid;
    float s = -1.0 / 0.0;
    if (p < p_end) {
      const uint row = ((blocks_u[table + p / bs] * nkv + kh) * bs + p % bs) * hd;
      float dot = 0.0;
      for (uint d = 0u; d < hd; ++d) dot += q[d] * k_at(row + d);
      s = dot * pc.f0;
    }
    score[lid] = s;
    red[lid] = s;
    barrier();
    for (uint w = 32u; w > 0u; w >>= 1) {
      if (lid < w) red[lid] = max(red[lid], red[lid + w]);
      barrier();
    }
    const float m_new = max(m, red[0]);
    const float corr = exp(m - m_new);
    l *= corr;
    for (uint j = 0u; j < 4u; ++j) acc[j] *= corr;
    const uint n_here = min(64u, p_end - p0);
    for (uint i = 0u; i < n_here; ++i) {
      const uint pp = p0 + i;
      const float e = exp(score[i] - m_new);
      l += e;
      const uint row = ((blocks_u[table + pp / bs] * nkv + kh) * bs + pp % bs) * hd;
      for (uint j = 0u; j < 4u; ++j) {
        const uint d = lid + 64u * j;
        if (d < hd) acc[j] += e * v_at(row + d);
      }
    }
    m = m_new;
    barrier();
  }
  if (parts == 1u) {
    for (uint j = 0u; j < 4u; ++j) {
      const uint d = lid + 64u * j;
      if (d < hd) out_f[r * width + h * hd + d] = acc[j] / l;
    }
    return;
  }
  const uint base = ((r * pc.n + h) * parts + part) * (hd + 2u);
  for (uint j = 0u; j < 4u; ++j) {
    const uint d = lid + 64u * j;
    if (d < hd) out_f[base + d] = acc[j];
  }
  if (lid == 0u) {
    out_f[base + hd] = m;  // -inf and a zero sum for an empty part
    out_f[base + hd + 1u] = l;
  }
}
