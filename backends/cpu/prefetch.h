// A software prefetch of one line into L1 for code outside the SIMD kernels. GCC judges a function
// that does nothing but __builtin_prefetch to be const (a prefetch touches no memory it models)
// and deletes its calls as dead code: GCC 12 removed every prefetch of the screened head's exact
// rows this way. A volatile asm statement is never judged so.
#pragma once

namespace hearth::cpu {

inline void prefetch_line(const void* p) {
#if defined(__x86_64__) || defined(__i386__)
  asm volatile("prefetcht0 %0" : : "m"(*static_cast<const char*>(p)));
#elif defined(__aarch64__)
  asm volatile("prfm pldl1keep, %0" : : "Q"(*static_cast<const char*>(p)));
#else
  __builtin_prefetch(p);
#endif
}

}  // namespace hearth::cpu
