// The compute pipelines, one per shader in shaders/ (SPIR-V compiled by glslc at build time and
// embedded), all over one descriptor set layout of nine storage buffers and one push-constant
// block (shaders/common.glsl says what each binding and field holds).
#pragma once
#include <vulkan/vulkan.h>

#include <array>
#include <cstdint>

#include "backends/vulkan/vk_context.h"

namespace hearth::vulkan {

enum class Kernel : uint8_t {
  Embed,
  RmsNorm,
  Rope,
  MatMul,
  MatMulRows,
  Binary,
  Gather,
  KvStore,
  Attention,
  Argmax,
  kCount
};
const char* kernel_name(Kernel k);

constexpr uint32_t kBindings = 9;
enum Binding : uint32_t { kOut, kA, kB, kW, kStep, kBlocks, kRope, kKCache, kVCache };

// Mirrors `PC` in shaders/common.glsl.
struct PushConstants {
  uint32_t rows = 0, cols = 0, n = 0, wtype = 0, step_T = 0, u0 = 0, u1 = 0, u2 = 0;
  float f0 = 0, f1 = 0;
};

class Kernels {
 public:
  explicit Kernels(Context& ctx);
  ~Kernels();
  Kernels(const Kernels&) = delete;
  Kernels& operator=(const Kernels&) = delete;

  VkDescriptorSetLayout set_layout() const { return set_layout_; }
  VkPipelineLayout pipeline_layout() const { return layout_; }
  VkPipeline pipeline(Kernel k) const { return pipelines_[size_t(k)]; }

 private:
  Context& ctx_;
  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout layout_ = VK_NULL_HANDLE;
  std::array<VkPipeline, size_t(Kernel::kCount)> pipelines_{};
};

}  // namespace hearth::vulkan
