// Random weights of every type the CUDA kernels read, packed as the checkpoint stores them (codes
// by tests/quant_placement.h, straight from quant/FORMAT.md), with each element's value as the
// layout defines it, in float64: for the CUDA index-math and kernel tests.
#pragma once
#include <cstring>
#include <random>
#include <vector>

#include "backends/cuda/cu_math.h"
#include "core/dtype.h"
#include "tests/quant_placement.h"

// In the backend's namespace, so that the emulated kernels' tests (tests/cuda_emu.h) get their
// own copy.
namespace hearth::HEARTH_CUDA_NS::testing {

namespace cu = hearth::HEARTH_CUDA_NS;

// A weight of `rows` x K of a given type with random values, and each element's value as the
// layout defines it (code x scale in float64 for the quantized ones).
struct TestWeight {
  std::vector<uint8_t> codes;
  std::vector<uint16_t> scales;

  std::vector<double> want;  // [rows, K]
  cu::WeightView view;
};

inline const int8_t kLevels[16] = {-127, -90, -66, -47, -31, -18, -8, -1,
                                   4,    11,  21,  34,  50,  70,  95, 126};

inline TestWeight make_weight(uint32_t type, int64_t rows, int64_t K, int group, bool bf16_scales,
                              uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  TestWeight w;
  w.want.resize(size_t(rows * K));
  w.view.cols = K;
  w.view.type = type;
  if (type <= cu::kBF16) {
    const size_t es = type == cu::kF32 ? 4 : 2;
    w.codes.resize(size_t(rows * K) * es);
    for (size_t i = 0; i < w.want.size(); ++i) {
      const float f = nd(rng);
      if (type == cu::kF32) {
        std::memcpy(&w.codes[i * 4], &f, 4);
        w.want[i] = f;
      } else {
        const uint16_t h = type == cu::kF16 ? f32_to_f16(f) : f32_to_bf16(f);
        std::memcpy(&w.codes[i * 2], &h, 2);
        w.want[i] = type == cu::kF16 ? f16_to_f32(h) : bf16_to_f32(h);
      }
    }
  } else {
    const int bits = type == cu::kQ8 ? 8 : 4;
    std::vector<int8_t> q(size_t(rows * K));
    for (auto& c : q) c = int8_t(int(rng() % (bits == 8 ? 255 : 16)) - (bits == 8 ? 127 : 8));
    w.scales.resize(size_t(rows * K / group));
    for (auto& s : w.scales) {
      const float f = 0.001f + 0.05f * float(rng() % 1000) / 1000.f * (rng() % 2 ? 1 : -1);
      s = bf16_scales ? f32_to_bf16(f) : f32_to_f16(f);
    }
    w.codes = test::pack_codes(bits, q.data(), rows, K);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < K; ++k) {
        const int c = q[size_t(r * K + k)];
        const double level = type == cu::kQ4Codebook ? kLevels[c + 8] : c;
        const uint16_t s = w.scales[size_t(r * (K / group) + k / group)];
        w.want[size_t(r * K + k)] = level * (bf16_scales ? bf16_to_f32(s) : f16_to_f32(s));
      }
    w.view.scales = reinterpret_cast<const uint8_t*>(w.scales.data());
    w.view.stype = bf16_scales ? cu::kBF16 : cu::kF16;
    w.view.group = uint32_t(group);
    std::memcpy(w.view.codebook, kLevels, 16);
  }
  w.view.codes = w.codes.data();
  return w;
}

}  // namespace hearth::HEARTH_CUDA_NS::testing
