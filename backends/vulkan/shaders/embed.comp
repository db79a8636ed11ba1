#version 450
// out[r, c] = table[tokens[r], c] widened to f32; table [vocab, cols] in w_words (any weight type).
#include "common.glsl"
layout(local_size_x = 64) in;
void main() {
  const uint c = gl_GlobalInvocationID.x, r = gl_GlobalInvocationID.y;
  if (c >= pc.cols || r >= pc.rows) return;
  out_f[r * pc.cols + c] = w_rc(step_token(r), c);
}
