#version 450
// The matmul of Q8 and Q4 weights on integer dot products, reducing in shared memory
// (matmul_body.glsl).
#define HEARTH_DOT
#include "matmul_body.glsl"
