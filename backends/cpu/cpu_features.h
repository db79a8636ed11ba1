// CPU feature detection, done once per backend object. BackendOptions::isa (the CLI: --isa or
// HEARTH_ISA) forces a lower level for tests and comparisons.
#pragma once
#include <string>

namespace hearth::cpu {

enum class Isa : int { Scalar = 0, Neon = 1, Avx2 = 2, Avx512 = 3 };

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512bf16 = false, avx512vnni = false, avxvnni = false;
  bool amd = false, amx_bf16 = false;
  bool neon = false, neon_dotprod = false, neon_bf16 = false;
  Isa best() const;
  // Whether bf16 dot products (vdpbf16ps, or AMX tiles through oneDNN) run at about twice the f32
  // FMA rate, so a bf16 GEMM pays: AMD Zen 4/5 and Intel CPUs with AMX-BF16. Decided from the
  // CPU's identity, not timed, so the numerics a machine gets do not depend on its load. (Measured:
  // oneDNN bf16 2.0x its f32 GEMM on Zen 5; an Intel Xeon VM with AVX512_BF16 but no AMX ran
  // vdpbf16ps at a quarter of its f32 FMA rate.)
  bool fast_bf16_dot() const { return avx512bf16 && (amd || amx_bf16); }
};

CpuFeatures detect_cpu_features();
const char* isa_name(Isa isa);
// Parses "avx512", "avx2", "neon", "scalar"; throws on anything else.
Isa parse_isa(const std::string& s);
// The ISA to use: the best the CPU has, lowered to `requested` when given.
// Asking for an ISA the CPU lacks is an error.
Isa choose_isa(const CpuFeatures& f, const std::string& requested);

}  // namespace hearth::cpu
