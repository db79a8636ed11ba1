#include "backends/cpu/cpu_features.h"

#include <cstdlib>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "core/error.h"

#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace hearth::cpu {

Isa CpuFeatures::best() const {
  if (avx512f && avx512bw && avx512vl && avx512dq && avx512bf16 && avx512vnni && fma && f16c)
    return Isa::Avx512;
  if (avx2 && fma && f16c) return Isa::Avx2;
  if (neon) return Isa::Neon;
  return Isa::Scalar;
}

CpuFeatures detect_cpu_features() {
  CpuFeatures f;
#if defined(__x86_64__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.f16c = __builtin_cpu_supports("f16c");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
  f.avx512vl = __builtin_cpu_supports("avx512vl");
  f.avx512dq = __builtin_cpu_supports("avx512dq");
  f.avx512bf16 = __builtin_cpu_supports("avx512bf16");
  f.avx512vnni = __builtin_cpu_supports("avx512vnni");
  f.avxvnni = __builtin_cpu_supports("avxvnni");
  f.amd = __builtin_cpu_is("amd");
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) f.amx_bf16 = (d >> 22) & 1;  // CPUID.7.0:EDX[22]
#elif defined(__aarch64__)
  f.neon = true;
#if defined(__linux__)
  unsigned long hw = getauxval(AT_HWCAP);
#ifdef HWCAP_ASIMDDP
  f.neon_dotprod = hw & HWCAP_ASIMDDP;
#endif
#endif
#endif
  return f;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar:
      return "scalar";
    case Isa::Neon:
      return "neon";
    case Isa::Avx2:
      return "avx2";
    case Isa::Avx512:
      return "avx512";
  }
  return "?";
}

Isa parse_isa(const std::string& s) {
  if (s == "scalar") return Isa::Scalar;
  if (s == "neon") return Isa::Neon;
  if (s == "avx2") return Isa::Avx2;
  if (s == "avx512") return Isa::Avx512;
  fail("unknown ISA '", s, "' (expected avx512, avx2, neon or scalar)");
}

Isa choose_isa(const CpuFeatures& f, const std::string& req) {
  Isa best = f.best();
  if (req.empty()) return best;
  Isa want = parse_isa(req);
  bool ok = want == Isa::Scalar || want == best || (want == Isa::Avx2 && best == Isa::Avx512);
  if (!ok) fail("ISA '", req, "' is not supported by this CPU (best: ", isa_name(best), ")");
  return want;
}

}  // namespace hearth::cpu
