#version 450
// out[i] = a[out_rows[i]] for the step's pc.rows output rows of pc.cols floats.
#include "common.glsl"
layout(local_size_x = 64) in;
void main() {
  const uint c = gl_GlobalInvocationID.x, i = gl_GlobalInvocationID.y;
  if (c >= pc.cols || i >= pc.rows) return;
  out_f[i * pc.cols + c] = a_f[step_out_row(i) * pc.cols + c];
}
