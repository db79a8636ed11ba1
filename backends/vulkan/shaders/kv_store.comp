#version 450
// Appends each step row's keys (a) and values (b), [rows, n_kv_heads * head_dim], to the paged
// cache: position p of a row goes to block blocks[table + p / block_size], laid out
// [block][kv head][block_size][head_dim] of pc.kvtype. pc.n = n_kv_heads, u0 = head_dim (even),
// u1 = block_size. An invocation stores a pair of elements: one 16-bit word or two f32.
#include "common.glsl"
layout(local_size_x = 64) in;
void main() {
  const uint hd = pc.u0, bs = pc.u1, width = pc.n * hd;
  const uint c = 2u * gl_GlobalInvocationID.x, r = gl_GlobalInvocationID.y;
  if (c >= width || r >= pc.rows) return;
  const uint h = c / hd, d = c % hd, p = step_pos(r);
  const uint blk = blocks_u[step_table(r) + p / bs];
  const uint at = ((blk * pc.n + h) * bs + p % bs) * hd + d;
  const uint src = r * width + c;
  if (pc.kvtype == kF32) {
    kcache[at] = floatBitsToUint(a_f[src]);
    kcache[at + 1u] = floatBitsToUint(a_f[src + 1u]);
    vcache[at] = floatBitsToUint(b_f[src]);
    vcache[at + 1u] = floatBitsToUint(b_f[src + 1u]);
  } else {
#ifdef HEARTH_STORAGE16
    k16[at] = uint16_t(kv_bits(a_f[src]));
    k16[at + 1u] = uint16_t(kv_bits(a_f[src + 1u]));
    v16[at] = uint16_t(kv_bits(b_f[src]));
    v16[at + 1u] = uint16_t(kv_bits(b_f[src + 1u]));
#else
    kcache[at >> 1] = pack_kv(a_f[src], a_f[src + 1u]);
    vcache[at >> 1] = pack_kv(b_f[src], b_f[src + 1u]);
#endif
  }
}
