#version 450
// Appends each step row's keys (a) and values (b), [rows, n_kv_heads * head_dim], to the paged
// cache: position p of a row goes to block blocks[table + p / block_size], laid out
// [block][kv head][block_size][head_dim] f32. pc.n = n_kv_heads, u0 = head_dim, u1 = block_size.
#include "common.glsl"
layout(local_size_x = 64) in;
void main() {
  const uint hd = pc.u0, bs = pc.u1, width = pc.n * hd;
  const uint c = gl_GlobalInvocationID.x, r = gl_GlobalInvocationID.y;
  if (c >= width || r >= pc.rows) return;
  const uint h = c / hd, d = c % hd, p = step_pos(r);
  const uint blk = blocks_u[step_table(r) + p / bs];
  const uint at = ((blk * pc.n + h) * bs + p % bs) * hd + d;
  kcache[at] = a_f[r * width + c];
  vcache[at] = b_f[r * width + c];
}
