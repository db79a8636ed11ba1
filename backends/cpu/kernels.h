// The CPU kernel table: one function pointer per (op, weight type), filled at start-up from the
// ISA chosen by detection. Scalar kernels fill every slot; ISA files override what they speed up.
#pragma once
#include <cstdint>

#include "backends/cpu/cpu_features.h"
#include "core/dtype.h"

namespace hearth::cpu {

// y[t*ldy + r] = dot(x[t*ldx .. +k], W[r*k .. +k]) for t < n_tokens and r in [r0, r1).
// W is row-major [rows, k] in its stored type; x and y are f32.
struct MatmulArgs {
  const void* w;
  int64_t k;
  const float* x;
  int64_t ldx;
  int n_tokens;
  float* y;
  int64_t ldy;
  int64_t r0, r1;
  float* scratch;  // per-thread, at least k floats
};
using MatmulFn = void (*)(const MatmulArgs&);

constexpr int kNumWeightTypes = 3;  // F32, F16, BF16
inline int weight_slot(DType t) { return t == DType::F32 ? 0 : t == DType::F16 ? 1 : 2; }

struct KernelTable {
  Isa isa = Isa::Scalar;
  MatmulFn matmul[kNumWeightTypes] = {};
};

void fill_kernels_scalar(KernelTable& k);
#if defined(__x86_64__)
void fill_kernels_avx2(KernelTable& k);
void fill_kernels_avx512(KernelTable& k);
#endif
#if defined(__aarch64__)
void fill_kernels_neon(KernelTable& k);
#endif

// The table for an ISA: scalar first, then each level up to `isa` overrides its slots.
KernelTable make_kernel_table(Isa isa);

}  // namespace hearth::cpu
