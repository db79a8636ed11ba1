#include "backends/cpu/kernels.h"

namespace hearth::cpu {

KernelTable make_kernel_table(Isa isa) {
  KernelTable k;
  fill_kernels_scalar(k);
#if defined(__x86_64__)
  if (isa >= Isa::Avx2) fill_kernels_avx2(k);
  if (isa >= Isa::Avx512) fill_kernels_avx512(k);
#endif
#if defined(__aarch64__)
  if (isa == Isa::Neon) fill_kernels_neon(k);
#endif
  k.isa = isa;
  return k;
}

}  // namespace hearth::cpu
