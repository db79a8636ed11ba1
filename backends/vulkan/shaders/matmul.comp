#version 450
// The matmul for long rows, reducing in shared memory (matmul_body.glsl).
#include "matmul_body.glsl"
