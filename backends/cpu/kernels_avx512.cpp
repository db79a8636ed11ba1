// AVX-512 kernels are added by the kernels work; until then AVX-512 machines use the AVX2 ones.
#include "backends/cpu/kernels.h"

namespace hearth::cpu {

void fill_kernels_avx512(KernelTable& k) { (void)k; }

}  // namespace hearth::cpu
