#version 450
// Causal GQA attention for long steps (prefill), as attention.comp computes it: a workgroup per
// (x = query head, y = eight step rows) stages the rows' queries and then 16 positions at a time
// of keys and values in shared memory, so each key and value is read once per eight rows instead
// of once per row. Scores, then an online softmax per row (its running maximum and sum) and the
// weighted values accumulate in registers, each invocation holding up to 16 (row, element)
// outputs. Rows of one workgroup that belong to different sequences (another block table) go
// through the positions run by run. pc as attention.comp.
#include "common.glsl"
layout(local_size_x = 128) in;
const uint kRows = 8u, kPos = 16u;
shared float q[kRows][256];
shared float kv[kPos][257];  // keys, then (after the scores) values; padded against bank conflicts
shared float p[kRows][kPos];  // scores, then softmax weights
shared float rescale[kRows];
shared float m_row[kRows], l_row[kRows];

void main() {
  const uint lid = gl_LocalInvocationID.x, h = gl_WorkGroupID.x, r0 = gl_WorkGroupID.y * kRows;
  const uint hd = pc.u0, bs = pc.u1, nkv = pc.u2, kh = h / (pc.n / nkv), width = pc.n * hd;
  const uint n_rows = min(kRows, pc.rows - r0);
  float acc[16];
  uint run = 0u;
  while (run < n_rows) {  // rows [run, run_end) share a block table
    const uint table = step_table(r0 + run);
    uint run_end = run + 1u;
    while (run_end < n_rows && step_table(r0 + run_end) == table) ++run_end;
    uint last = 0u;
    for (uint i = run; i < run_end; ++i) last = max(last, step_pos(r0 + i));
    for (uint o = lid; o < kRows * 256u; o += 128u) {
      const uint i = o / 256u, d = o % 256u;
      q[i][d] = i >= run && i < run_end && d < hd ? a_f[(r0 + i) * width + h * hd + d] * pc.f0 : 0.0;
    }
    if (lid < kRows) m_row[lid] = -1.0 / 0.0, l_row[lid] = 0.0;
    for (uint j = 0u; j < 16u; ++j) acc[j] = 0.0;
    barrier();
    for (uint p0 = 0u; p0 <= last; p0 += kPos) {
      for (uint o = lid; o < kPos * hd; o += 128u) {  // keys
        const uint i = o / hd, d = o % hd, pp = p0 + i;
        kv[i][d] = pp <= last ? k_at(((blocks_u[table + pp / bs] * nkv + kh) * bs + pp % bs) * hd + d) : 0.0;
      }
      barrier();
      {  // one score per invocation: row lid / 16, position lid % 16
        const uint i = lid / kPos, j = lid % kPos;
        float s = -1.0 / 0.0;
        if (i >= run && i < run_end && p0 + j <= step_pos(r0 + i)) {
          s = 0.0;
          for (uint d = 0u; d < hd; ++d) s += q[i][d] * kv[j][d];
        }
        p[i][j] = s;
      }
      barrier();
      if (lid < kRows) {  // the row's online softmax over this tile
        const uint i = lid;
        float mx = m_row[i];
        for (uint j = 0u; j < kPos; ++j) mx = max(mx, p[i][j]);
        const float corr = mx == -1.0 / 0.0 ? 1.0 : exp(m_row[i] - mx);
        float sum = 0.0;
        for (uint j = 0u; j < kPos; ++j) {
          const float e = p[i][j] == -1.0 / 0.0 ? 0.0 : exp(p[i][j] - mx);
          p[i][j] = e;
          sum += e;
        }
        l_row[i] = l_row[i] * corr + sum;
        m_row[i] = mx;
        rescale[i] = corr;
      }
      for (uint o = lid; o < kPos * hd; o += 128u) {  // values, over the keys (all scored)
        const uint i = o / hd, d = o % hd, pp = p0 + i;
        kv[i][d] = pp <= last ? v_at(((blocks_u[table + pp / bs] * nkv + kh) * bs + pp % bs) * hd + d) : 0.0;
      }
      barrier();
      for (uint j = 0u; j < 16u; ++j) {
        const uint o = lid + 128u * j, i = o / hd, d = o % hd;
        if (o >= kRows * hd) break;
        float a = acc[j] * rescale[i];
        for (uint t = 0u; t < kPos; ++t) a += p[i][t] * kv[t][d];
        acc[j] = a;
      }
      barrier();  // done with kv and p before the next tile
    }
    for (uint j = 0u; j < 16u; ++j) {
      const uint o = lid + 128u * j, i = o / hd, d = o % hd;
      if (o >= kRows * hd) break;
      if (i >= run && i < run_end) out_f[(r0 + i) * width + h * hd + d] = acc[j] / l_row[i];
    }
    barrier();  // l_row and q are rewritten by the next run
    run = run_end;
  }
}
