// Force-included into backends/cpu/cpu_features.cpp by cmake/fuzz.cmake when the compiler is a
// clang older than 16, whose __builtin_cpu_supports does not know "f16c" or "avxvnni" (a compile
// error): those two are read from CPUID instead, the others go to the builtin, and a name this
// list lacks aborts (the parsers the fuzz targets run never ask).
#pragma once
#if defined(__x86_64__) && defined(__clang__) && __clang_major__ < 16
#include <cpuid.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>

static inline int hearth_fuzz_cpu_supports(const char* f) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (std::strcmp(f, "f16c") == 0) return __get_cpuid(1, &a, &b, &c, &d) && ((c >> 29) & 1);
  if (std::strcmp(f, "avxvnni") == 0)
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 4) & 1);
#define HEARTH_FUZZ_CPU(name) \
  if (std::strcmp(f, name) == 0) return __builtin_cpu_supports(name);
  HEARTH_FUZZ_CPU("avx2")
  HEARTH_FUZZ_CPU("fma")
  HEARTH_FUZZ_CPU("avx512f")
  HEARTH_FUZZ_CPU("avx512bw")
  HEARTH_FUZZ_CPU("avx512vl")
  HEARTH_FUZZ_CPU("avx512dq")
  HEARTH_FUZZ_CPU("avx512bf16")
  HEARTH_FUZZ_CPU("avx512vnni")
#undef HEARTH_FUZZ_CPU
  std::fprintf(stderr, "tests/fuzz/clang14_cpu_supports.h: add the feature '%s'\n", f);
  std::abort();
}
#define __builtin_cpu_supports(name) hearth_fuzz_cpu_supports(name)
#endif
