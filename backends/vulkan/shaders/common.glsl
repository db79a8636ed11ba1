// What every hearth compute shader shares: one descriptor set layout of ten storage buffers (the
// backend binds a dummy where a shader reads nothing), one push-constant block, and the readers of
// weights kept in the checkpoint's own bytes as 32-bit words (F32, two F16/BF16 per word, or the
// Q8/Q4 codes of quant/FORMAT.md with their F16/BF16 group scales), so no shader needs 8- or
// 16-bit storage. Compiled with HEARTH_STORAGE16 (devices with 16-bit storage and int16), the 16-bit
// values of weights, scales and KV caches are read and written as 16-bit elements of the same
// bindings instead of halves of words. Compiled with HEARTH_DOT (devices with integer dot
// products), binding 2 holds int8 activations for the quantized mat-vec (matmul_body.glsl).
#ifdef HEARTH_STORAGE16
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#endif
#ifdef HEARTH_DOT
#extension GL_EXT_spirv_intrinsics : require
#endif

#ifdef HEARTH_DOT
// Integer dot products of four packed bytes (SPV_KHR_integer_dot_product, which Debian's glslang
// has no GLSL extension for): OpSDot on two signed operands, OpSUDot on a signed and an unsigned.
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018],
                  id = 4450) int sdot_packed(uint a, uint b, spirv_literal int packed_format);
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018],
                  id = 4452) int sudot_packed(uint a, uint b, spirv_literal int packed_format);
int dot_ss(uint a, uint b) { return sdot_packed(a, b, 0); }  // 0: PackedVectorFormat4x8Bit
int dot_su(uint a, uint b) { return sudot_packed(a, b, 0); }
#endif

#ifdef HEARTH_OUT_UINT  // a shader that writes words, not floats
layout(std430, set = 0, binding = 0) buffer OutBuf { uint out_u[]; };
#else
layout(std430, set = 0, binding = 0) buffer OutBuf { float out_f[]; };
#endif
layout(std430, set = 0, binding = 1) readonly buffer ABuf { float a_f[]; };
#ifdef HEARTH_DOT  // the int8 activations quant_act.comp wrote (act_i8_* below)
layout(std430, set = 0, binding = 2) readonly buffer BBuf { uint b_u[]; };
#else
layout(std430, set = 0, binding = 2) readonly buffer BBuf { float b_f[]; };
#endif
layout(std430, set = 0, binding = 3) readonly buffer WBuf { uint w_words[]; };
// The step's integers: tokens [0, T), positions [T, 2T), block-table offsets [2T, 3T), then the
// rows whose logits are wanted and each one's top-k (0: none), max outputs each; T is pc.step_T.
layout(std430, set = 0, binding = 4) readonly buffer StepBuf { uint step_u[]; };
layout(std430, set = 0, binding = 5) readonly buffer BlockBuf { uint blocks_u[]; };
// Per step row, head_dim / 2 pairs (cos, sin), computed on the host in double.
layout(std430, set = 0, binding = 6) readonly buffer RopeBuf { float rope_f[]; };
// The paged KV cache of one layer as 32-bit words: f32 values, or two f16/bf16 (pc.kvtype).
layout(std430, set = 0, binding = 7) buffer KBuf { uint kcache[]; };
layout(std430, set = 0, binding = 8) buffer VBuf { uint vcache[]; };
// A quantized weight's scales, [rows, cols / group] F16 or BF16.
layout(std430, set = 0, binding = 9) readonly buffer SBuf { uint s_words[]; };
#ifdef HEARTH_STORAGE16  // the same bindings as 16-bit elements
layout(std430, set = 0, binding = 3) readonly buffer W16Buf { uint16_t w16[]; };
layout(std430, set = 0, binding = 7) buffer K16Buf { uint16_t k16[]; };
layout(std430, set = 0, binding = 8) buffer V16Buf { uint16_t v16[]; };
layout(std430, set = 0, binding = 9) readonly buffer S16Buf { uint16_t s16[]; };
#endif

layout(push_constant) uniform PC {
  uint rows;    // rows of this dispatch (step tokens or output rows)
  uint cols;    // the row width (K of a matmul)
  uint n;       // matmul: output columns; norms: width of the weight; attention: query heads
  uint wtype;   // the weight's type: kF32, kF16, kBF16, kQ8, kQ4, kQ4Codebook
  uint step_T;  // the compiled graph's max tokens (the step buffer's section length)
  uint u0, u1, u2;
  float f0, f1;
  uint group;        // quantized weights: elements per scale
  uint stype;        // their scales' type: kF16 or kBF16
  uint codebook[4];  // kQ4Codebook: the 16 int8 levels, four per word, level 0 lowest byte
  uint kvtype;       // the KV cache's type: kF32, kF16 or kBF16
} pc;

const uint kF32 = 0u, kF16 = 1u, kBF16 = 2u, kQ8 = 3u, kQ4 = 4u, kQ4Codebook = 5u;

// 16-bit value bits h as a float of type kF16 or kBF16.
float half_to_float(uint h, uint type) {
  return type == kBF16 ? uintBitsToFloat(h << 16) : unpackHalf2x16(h).x;
}
#ifdef HEARTH_STORAGE16
uint w_half(uint i) { return uint(w16[i]); }
uint s_half(uint i) { return uint(s16[i]); }
uint k_half(uint i) { return uint(k16[i]); }
uint v_half(uint i) { return uint(v16[i]); }
#else
// The i-th 16-bit value of a binding of words.
uint half_of(uint word, uint i) { return (i & 1u) != 0u ? (word >> 16) : (word & 0xffffu); }
uint w_half(uint i) { return half_of(w_words[i >> 1], i); }
uint s_half(uint i) { return half_of(s_words[i >> 1], i); }
uint k_half(uint i) { return half_of(kcache[i >> 1], i); }
uint v_half(uint i) { return half_of(vcache[i >> 1], i); }
#endif

float w_at(uint i) {
  if (pc.wtype == kF32) return uintBitsToFloat(w_words[i]);
  return half_to_float(w_half(i), pc.wtype);
}

// Element (row, col) of the bound weight of pc.cols columns, in any weight type. Quantized codes
// sit in chunks of 128 (the last of a row may hold m = 1..3 blocks of 32): element 32b + 16h + 4q
// + e of a chunk is slot 4(m q + b) + e of half h (quant/FORMAT.md).
float w_rc(uint row, uint col) {
  const uint K = pc.cols;
  if (pc.wtype < kQ8) return w_at(row * K + col);
  const uint c0 = col & ~127u, m = min(K - c0, 128u) / 32u, r = col - c0;
  const uint h = (r & 31u) >> 4, slot = 4u * (m * ((r & 15u) >> 2) + (r >> 5)) + (r & 3u);
  float q;
  if (pc.wtype == kQ8) {
    const uint byte = row * K + c0 + 16u * m * h + slot;
    q = float(int(w_words[byte >> 2] << (24u - 8u * (byte & 3u))) >> 24);
  } else {
    const uint byte = row * (K / 2u) + c0 / 2u + slot;
    const uint nib = (w_words[byte >> 2] >> (8u * (byte & 3u) + 4u * h)) & 15u;
    if (pc.wtype == kQ4)
      q = float(int(nib) - 8);
    else
      q = float(int(pc.codebook[nib >> 2] << (24u - 8u * (nib & 3u))) >> 24);
  }
  const uint si = row * (K / pc.group) + col / pc.group;
  return q * half_to_float(s_half(si), pc.stype);
}

float k_at(uint i) {
  return pc.kvtype == kF32 ? uintBitsToFloat(kcache[i]) : half_to_float(k_half(i), pc.kvtype);
}
float v_at(uint i) {
  return pc.kvtype == kF32 ? uintBitsToFloat(vcache[i]) : half_to_float(v_half(i), pc.kvtype);
}

// Two values as one word of the KV type (round to nearest even, as core/dtype.h; NaN stays NaN).
uint bf16_bits(float f) {
  const uint u = floatBitsToUint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
uint kv_bits(float f) {
  return pc.kvtype == kBF16 ? bf16_bits(f) : packHalf2x16(vec2(f, 0.0)) & 0xffffu;
}
uint pack_kv(float lo, float hi) {
  return kv_bits(lo) | (kv_bits(hi) << 16);
}

// Step rows' activations as int8 per block of 32 (quant_act.comp), for K = pc.cols: row t's codes
// at words [t K / 4, (t + 1) K / 4) in element order, then every row's block scales (f32 bits),
// then their code sums; rows below kActI8Rows (the steps shorter than the tiled shaders' 32).
const uint kActI8Rows = 32u;
uint act_i8_scale(uint t, uint b) { return kActI8Rows * (pc.cols / 4u) + t * (pc.cols / 32u) + b; }
uint act_i8_sum(uint t, uint b) {
  return kActI8Rows * (pc.cols / 4u + pc.cols / 32u) + t * (pc.cols / 32u) + b;
}

uint step_token(uint r) { return step_u[r]; }
uint step_pos(uint r) { return step_u[pc.step_T + r]; }
uint step_table(uint r) { return step_u[2u * pc.step_T + r]; }
uint step_out_row(uint i) { return step_u[3u * pc.step_T + i]; }
