#version 450
// out[r, c] = table[tokens[r], c] widened to f32; table [vocab, cols] in w_words (any weight type),
// this dispatch's part of it being rows [u1, u1 + u2).
#include "common.glsl"
layout(local_size_x = 64) in;
void main() {
  const uint c = gl_GlobalInvocationID.x, r = gl_GlobalInvocationID.y;
  if (c >= pc.cols || r >= pc.rows) return;
  const uint id = step_token(r);
  if (id < pc.u1 || id - pc.u1 >= pc.u2) return;  // another part's row
  out_f[r * pc.cols + c] = w_rc(id - pc.u1, c);
}
