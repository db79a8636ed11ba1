// How the quantized matmuls of every ISA dispatch: to a kernel compiled per group size, and, for
// panel copies, the rows outside whole 16-row groups to the row-major kernel. Anonymous namespace:
// include only from kernel files (each gets its own copy, compiled with its own flags).
#pragma once
#include <type_traits>
#include <utility>

#include "backends/cpu/kernels.h"

namespace hearth::cpu::qk {
namespace {

// Calls f(std::integral_constant<int, G>()) for the group size (32, 64 or 128: the loader allows no
// other), so each kernel is compiled once per group size.
template <class F>
inline void with_group(int group, F f) {
  switch (group) {
    case 32:
      return f(std::integral_constant<int, 32>());
    case 64:
      return f(std::integral_constant<int, 64>());
    default:
      return f(std::integral_constant<int, 128>());
  }
}

// Calls f(group constant, scale type constant) for the group size (as with_group) and the scale
// type (BF16, else F16), so each kernel is compiled once per pair.
template <class F>
inline void with_group_scales(int group, DType scale_dtype, F f) {
  with_group(group, [&](auto g) {
    if (scale_dtype == DType::BF16) return f(g, std::integral_constant<DType, DType::BF16>());
    f(g, std::integral_constant<DType, DType::F16>());
  });
}

// Rows [a.r0, a.r1) outside the whole `group_rows`-row groups [g.g0, g.g1) through rows(b), b being
// a for those rows only and without the copy (the row-major kernel, from w); returns whether any
// ran (they leave their own activations in the scratch).
template <class Rows>
inline bool rows_outside_groups(const QuantMatmulArgs& a, WholeGroups g, Rows rows) {
  bool ran = false;
  for (auto [r0, r1] : {std::pair{a.r0, g.g0}, std::pair{g.g1, a.r1}}) {
    if (r0 >= r1) continue;
    QuantMatmulArgs b = a;
    b.w_il = nullptr, b.reuse_x = false, b.r0 = r0, b.r1 = r1, b.y = a.y + (r0 - a.r0);
    rows(b);
    ran = true;
  }
  return ran;
}

}  // namespace
}  // namespace hearth::cpu::qk
