// What every hearth compute shader shares: one descriptor set layout of nine storage buffers (the
// backend binds a dummy where a shader reads nothing), one push-constant block, and the readers of
// weights kept in the checkpoint's own bytes as 32-bit words (F32, or two F16/BF16 per word), so
// no shader needs 16-bit storage.

layout(std430, set = 0, binding = 0) buffer OutBuf { float out_f[]; };
layout(std430, set = 0, binding = 1) readonly buffer ABuf { float a_f[]; };
layout(std430, set = 0, binding = 2) readonly buffer BBuf { float b_f[]; };
layout(std430, set = 0, binding = 3) readonly buffer WBuf { uint w_words[]; };
// The step's integers: tokens [0, T), positions [T, 2T), block-table offsets [2T, 3T), then the
// rows whose logits are wanted; T is pc.step_T.
layout(std430, set = 0, binding = 4) readonly buffer StepBuf { uint step_u[]; };
layout(std430, set = 0, binding = 5) readonly buffer BlockBuf { uint blocks_u[]; };
// Per step row, head_dim / 2 pairs (cos, sin), computed on the host in double.
layout(std430, set = 0, binding = 6) readonly buffer RopeBuf { float rope_f[]; };
layout(std430, set = 0, binding = 7) buffer KBuf { float kcache[]; };
layout(std430, set = 0, binding = 8) buffer VBuf { float vcache[]; };

layout(push_constant) uniform PC {
  uint rows;    // rows of this dispatch (step tokens or output rows)
  uint cols;    // the row width (K of a matmul)
  uint n;       // matmul: output columns; norms: width of the weight; attention: query heads
  uint wtype;   // the weight's dtype: 0 F32, 1 F16, 2 BF16 (core/dtype.h order)
  uint step_T;  // the compiled graph's max tokens (the step buffer's section length)
  uint u0, u1, u2;
  float f0, f1;
} pc;

const uint kF32 = 0u, kF16 = 1u, kBF16 = 2u;

float w_at(uint i) {
  if (pc.wtype == kF32) return uintBitsToFloat(w_words[i]);
  const uint word = w_words[i >> 1];
  const uint h = (i & 1u) != 0u ? (word >> 16) : (word & 0xffffu);
  if (pc.wtype == kBF16) return uintBitsToFloat(h << 16);
  return unpackHalf2x16(h).x;
}

uint step_token(uint r) { return step_u[r]; }
uint step_pos(uint r) { return step_u[pc.step_T + r]; }
uint step_table(uint r) { return step_u[2u * pc.step_T + r]; }
uint step_out_row(uint i) { return step_u[3u * pc.step_T + i]; }
