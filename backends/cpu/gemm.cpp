#include "backends/cpu/gemm.h"

#include "core/error.h"

namespace hearth::cpu {

#if defined(HEARTH_HAVE_DNNL)
std::unique_ptr<Gemm> make_dnnl_gemm(bool bf16, int n_threads);
#endif
#if defined(HEARTH_HAVE_OPENBLAS)
std::unique_ptr<Gemm> make_openblas_gemm();
#endif

namespace {
constexpr bool kHaveDnnl =
#if defined(HEARTH_HAVE_DNNL)
    true;
#else
    false;
#endif
constexpr bool kHaveOpenBlas =
#if defined(HEARTH_HAVE_OPENBLAS)
    true;
#else
    false;
#endif
}  // namespace

GemmKind choose_gemm(const std::string& requested, bool fast_bf16) {
  if (requested.empty() || requested == "auto") {
    if (kHaveDnnl) return fast_bf16 ? GemmKind::DnnlBf16 : GemmKind::Dnnl;
    return kHaveOpenBlas ? GemmKind::OpenBlas : GemmKind::Native;
  }
  if (requested == "native") return GemmKind::Native;
  if (requested == "dnnl" || requested == "dnnl-bf16") {
    if (!kHaveDnnl) fail("GEMM '", requested, "': this build has no oneDNN");
    return requested == "dnnl" ? GemmKind::Dnnl : GemmKind::DnnlBf16;
  }
  if (requested == "openblas") {
    if (!kHaveOpenBlas) fail("GEMM 'openblas': this build has no OpenBLAS");
    return GemmKind::OpenBlas;
  }
  fail("unknown GEMM '", requested, "' (expected auto, dnnl, dnnl-bf16, openblas or native)");
}

const char* gemm_name(GemmKind k) {
  switch (k) {
    case GemmKind::Native:
      return "native";
    case GemmKind::Dnnl:
      return "dnnl";
    case GemmKind::DnnlBf16:
      return "dnnl-bf16";
    case GemmKind::OpenBlas:
      return "openblas";
  }
  return "?";
}

void Gemm::bf16(int, int, int64_t, int64_t, const uint16_t*, int64_t, const uint16_t*, float*,
                int64_t) {
  fail("cpu backend: this GEMM has no bf16 path");
}

std::unique_ptr<Gemm> make_gemm(GemmKind kind, int n_threads) {
  switch (kind) {
    case GemmKind::Native:
      return nullptr;
#if defined(HEARTH_HAVE_DNNL)
    case GemmKind::Dnnl:
      return make_dnnl_gemm(false, n_threads);
    case GemmKind::DnnlBf16:
      return make_dnnl_gemm(true, n_threads);
#endif
#if defined(HEARTH_HAVE_OPENBLAS)
    case GemmKind::OpenBlas:
      return make_openblas_gemm();
#endif
    default:
      break;
  }
  fail("cpu backend: GEMM ", gemm_name(kind), " is not in this build");
}

}  // namespace hearth::cpu
