// Random test inputs, the same for a seed on every machine (std::mt19937 and its normal
// distribution as libstdc++ has them).
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace hearth::test {

// n normal values of mean 0 and standard deviation `scale`.
inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

}  // namespace hearth::test
