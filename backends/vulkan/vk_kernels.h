// The compute pipelines, one per shader in shaders/ (SPIR-V compiled by glslc at build time and
// embedded), all over one descriptor set layout of ten storage buffers and one push-constant
// block (shaders/common.glsl says what each binding and field holds).
#pragma once
#include <vulkan/vulkan.h>

#include <array>
#include <cstdint>

#include "backends/vulkan/vk_context.h"
#include "core/dtype.h"

namespace hearth::vulkan {

enum class Kernel : uint8_t {
  Embed,
  RmsNorm,
  Rope,
  MatMul,
  MatMulRows,
  MatMulTiled,
  QuantAct,   // int8 activations for MatMulDot
  MatMulDot,  // Q8 and Q4 on integer dot products
  Binary,
  Gather,
  KvStore,
  Attention,
  AttentionMerge,
  AttentionTiled,
  Argmax,
  TopK,
  kCount
};
const char* kernel_name(Kernel k);

constexpr uint32_t kBindings = 10;
enum Binding : uint32_t { kOut, kA, kB, kW, kStep, kBlocks, kRope, kKCache, kVCache, kScales };
// Rows the int8 activations of QuantAct hold (kActI8Rows in shaders/common.glsl): steps of fewer
// rows than the tiled shaders take (vk_step.cpp), so any short step fits.
constexpr uint32_t kActI8Rows = 32;

// Mirrors `PC` in shaders/common.glsl.
struct PushConstants {
  uint32_t rows = 0, cols = 0, n = 0, wtype = 0, step_T = 0, u0 = 0, u1 = 0, u2 = 0;
  float f0 = 0, f1 = 0;
  uint32_t group = 0, stype = 0;
  uint32_t codebook[4] = {0, 0, 0, 0};
  uint32_t kvtype = 0;  // kWF32, kWF16 or kWBF16
};
// PushConstants::wtype.
enum WeightType : uint32_t { kWF32, kWF16, kWBF16, kWQ8, kWQ4, kWQ4Codebook };
// The code of a plain F32, F16 or BF16 type, as wtype, stype and kvtype take it.
inline uint32_t float_type(DType t) {
  return t == DType::F32 ? kWF32 : t == DType::F16 ? kWF16 : kWBF16;
}

class Kernels {
 public:
  // subgroups: build the kernels that have a subgroup-arithmetic variant with it; storage16: those
  // that read 16-bit values with 16-bit storage (the device must have it enabled); integer_dot:
  // build QuantAct and MatMulDot (the device must have integer dot products enabled), else their
  // pipelines stay null.
  Kernels(Context& ctx, bool subgroups, bool storage16, bool integer_dot);
  ~Kernels();
  Kernels(const Kernels&) = delete;
  Kernels& operator=(const Kernels&) = delete;

  VkDescriptorSetLayout set_layout() const { return set_layout_; }
  VkPipelineLayout pipeline_layout() const { return layout_; }
  VkPipeline pipeline(Kernel k) const { return pipelines_[size_t(k)]; }

 private:
  void create(bool subgroups, bool storage16, bool integer_dot);
  void release();  // what the destructor frees, also after a failed constructor
  Context& ctx_;
  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  std::array<VkPipeline, size_t(Kernel::kCount)> pipelines_{};
};

}  // namespace hearth::vulkan
