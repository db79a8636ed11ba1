// The register-only loops `hearth bench` measures peaks with (KernelTable::fma_loop and the dot
// loops): N independent chains of one instruction, so its throughput, not its latency, sets the
// pace. Templates in an anonymous namespace: each ISA's file instantiates its own copy.
#pragma once
#include <cstdint>

namespace hearth::cpu {
namespace {

// Chain j starts at start(j) and takes iters steps of step(); returns the chains summed by add().
template <int N, class Start, class Step, class Add>
inline auto run_chains(int64_t iters, Start start, Step step, Add add) {
  decltype(start(0)) acc[N];
  for (int j = 0; j < N; ++j) acc[j] = start(j);
  for (int64_t i = 0; i < iters; ++i) {
#pragma GCC unroll 16
    for (int j = 0; j < N; ++j) acc[j] = step(acc[j]);
  }
  auto s = acc[0];
  for (int j = 1; j < N; ++j) s = add(s, acc[j]);
  return s;
}

}  // namespace
}  // namespace hearth::cpu
