#version 450
// The matmul for long rows, reducing with subgroup arithmetic where the device has it
// (matmul_body.glsl).
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#define HEARTH_SUBGROUP
#include "matmul_body.glsl"
