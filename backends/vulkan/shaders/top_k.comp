#version 450
// The sampler's top-k (core/gpu_readback.h): a workgroup per output row of pc.cols logits finds
// the key of the k-th largest by a radix select over its four bytes, then writes a count and the
// (index, value bits) of every logit at or above it: kWords words for row pc.u1 + r of the
// entries. Its k is step_u[3T + u0 + u1 + r] (u0: the graph's max outputs), 0 for none.
#define HEARTH_OUT_UINT
#include "common.glsl"
layout(local_size_x = 256) in;
const uint kCap = 256u, kWords = 1u + 2u * kCap;  // kGpuTopKCap, kGpuTopKWords
shared uint hist[256];
shared uint prefix, need, count;

// Orders as the float does, NaN as -inf, -0 as +0 (backends/cuda/cu_math.h top_k_key).
uint key_of(float v) {
  uint b = floatBitsToUint(v);
  if ((b & 0x7fffffffu) > 0x7f800000u) b = 0xff800000u;
  if (b == 0x80000000u) b = 0u;
  return (b & 0x80000000u) != 0u ? ~b : (b | 0x80000000u);
}

void main() {
  const uint lid = gl_LocalInvocationID.x, r = gl_WorkGroupID.x;
  const uint k = step_u[3u * pc.step_T + pc.u0 + pc.u1 + r];
  if (k == 0u) return;  // the host reads this row whole (k is the workgroup's, uniform)
  const uint base = r * pc.cols, e = (pc.u1 + r) * kWords;
  if (lid == 0u) {
    prefix = 0u;
    need = min(k, pc.cols);
    count = 0u;
  }
  for (int shift = 24; shift >= 0; shift -= 8) {
    hist[lid] = 0u;
    barrier();  // hist cleared, prefix as the last pass (or the start) left it
    const uint high = shift == 24 ? 0u : (~0u << uint(shift + 8)), known = prefix;
    for (uint c = lid; c < pc.cols; c += 256u) {
      const uint key = key_of(a_f[base + c]);
      if ((key & high) == known) atomicAdd(hist[(key >> uint(shift)) & 255u], 1u);
    }
    barrier();  // every key counted
    if (lid == 0u) {  // the digit of the k-th largest; the keys of the digits above leave need
      uint d = 255u, left = need;
      for (; d > 0u; --d) {
        if (hist[d] >= left) break;
        left -= hist[d];
      }
      prefix |= d << uint(shift);
      need = left;
    }
    barrier();  // the digit is fixed before anyone reads prefix or clears hist
  }
  const uint t = prefix;
  for (uint c = lid; c < pc.cols; c += 256u) {
    const float v = a_f[base + c];
    if (key_of(v) < t) continue;
    const uint slot = atomicAdd(count, 1u);
    if (slot < kCap) {
      out_u[e + 1u + 2u * slot] = c;
      out_u[e + 2u + 2u * slot] = floatBitsToUint(v);
    }
  }
  barrier();
  if (lid == 0u) out_u[e] = count;
}
