#version 450
// The matmul of Q8 and Q4 weights on integer dot products, reducing with subgroup arithmetic
// (matmul_body.glsl).
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#define HEARTH_SUBGROUP
#define HEARTH_DOT
#include "matmul_body.glsl"
