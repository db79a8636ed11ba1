#include "backends/vulkan/vk_kernels.h"

#include <vector>

#include "core/error.h"

namespace hearth::vulkan {

namespace {

// SPIR-V words from glslc -mfmt=num (cmake/vulkan.cmake).
const uint32_t kEmbedSpv[] = {
#include "embed.spv.inc"
};
const uint32_t kRmsNormSpv[] = {
#include "rms_norm.spv.inc"
};
const uint32_t kRopeSpv[] = {
#include "rope.spv.inc"
};
const uint32_t kMatMulSpv[] = {
#include "matmul.spv.inc"
};
const uint32_t kMatMulSubgroupSpv[] = {
#include "matmul_subgroup.spv.inc"
};
const uint32_t kMatMulRowsSpv[] = {
#include "matmul_rows.spv.inc"
};
const uint32_t kMatMulTiledSpv[] = {
#include "matmul_tiled.spv.inc"
};
const uint32_t kQuantActSpv[] = {
#include "quant_act.spv.inc"
};
const uint32_t kMatMulDotSpv[] = {
#include "matmul_dot.spv.inc"
};
const uint32_t kMatMulDotSubgroupSpv[] = {
#include "matmul_dot_subgroup.spv.inc"
};
const uint32_t kBinarySpv[] = {
#include "binary.spv.inc"
};
const uint32_t kGatherSpv[] = {
#include "gather.spv.inc"
};
const uint32_t kKvStoreSpv[] = {
#include "kv_store.spv.inc"
};
const uint32_t kAttentionSpv[] = {
#include "attention.spv.inc"
};
const uint32_t kAttentionMergeSpv[] = {
#include "attention_merge.spv.inc"
};
const uint32_t kAttentionTiledSpv[] = {
#include "attention_tiled.spv.inc"
};
const uint32_t kArgmaxSpv[] = {
#include "argmax.spv.inc"
};
const uint32_t kTopKSpv[] = {
#include "top_k.spv.inc"
};

// The same with 16-bit storage (-DHEARTH_STORAGE16).
const uint32_t kEmbedS16Spv[] = {
#include "embed_s16.spv.inc"
};
const uint32_t kRmsNormS16Spv[] = {
#include "rms_norm_s16.spv.inc"
};
const uint32_t kMatMulS16Spv[] = {
#include "matmul_s16.spv.inc"
};
const uint32_t kMatMulSubgroupS16Spv[] = {
#include "matmul_subgroup_s16.spv.inc"
};
const uint32_t kMatMulRowsS16Spv[] = {
#include "matmul_rows_s16.spv.inc"
};
const uint32_t kMatMulTiledS16Spv[] = {
#include "matmul_tiled_s16.spv.inc"
};
const uint32_t kKvStoreS16Spv[] = {
#include "kv_store_s16.spv.inc"
};
const uint32_t kAttentionS16Spv[] = {
#include "attention_s16.spv.inc"
};
const uint32_t kAttentionTiledS16Spv[] = {
#include "attention_tiled_s16.spv.inc"
};

struct Spirv {
  const uint32_t* words;
  size_t bytes;
};
template <size_t N>
Spirv spirv(const uint32_t (&w)[N]) {
  return {w, sizeof(w)};
}

Spirv code_of(Kernel k, bool subgroups, bool s16) {
  switch (k) {
    case Kernel::Embed:
      return s16 ? spirv(kEmbedS16Spv) : spirv(kEmbedSpv);
    case Kernel::RmsNorm:
      return s16 ? spirv(kRmsNormS16Spv) : spirv(kRmsNormSpv);
    case Kernel::Rope:
      return spirv(kRopeSpv);
    case Kernel::MatMul:
      if (subgroups) return s16 ? spirv(kMatMulSubgroupS16Spv) : spirv(kMatMulSubgroupSpv);
      return s16 ? spirv(kMatMulS16Spv) : spirv(kMatMulSpv);
    case Kernel::MatMulRows:
      return s16 ? spirv(kMatMulRowsS16Spv) : spirv(kMatMulRowsSpv);
    case Kernel::MatMulTiled:
      return s16 ? spirv(kMatMulTiledS16Spv) : spirv(kMatMulTiledSpv);
    case Kernel::QuantAct:
      return spirv(kQuantActSpv);
    case Kernel::MatMulDot:
      return subgroups ? spirv(kMatMulDotSubgroupSpv) : spirv(kMatMulDotSpv);
    case Kernel::Binary:
      return spirv(kBinarySpv);
    case Kernel::Gather:
      return spirv(kGatherSpv);
    case Kernel::KvStore:
      return s16 ? spirv(kKvStoreS16Spv) : spirv(kKvStoreSpv);
    case Kernel::Attention:
      return s16 ? spirv(kAttentionS16Spv) : spirv(kAttentionSpv);
    case Kernel::AttentionMerge:
      return spirv(kAttentionMergeSpv);
    case Kernel::AttentionTiled:
      return s16 ? spirv(kAttentionTiledS16Spv) : spirv(kAttentionTiledSpv);
    case Kernel::TopK:
      return spirv(kTopKSpv);
    case Kernel::Argmax:
    case Kernel::kCount:
      break;
  }
  return spirv(kArgmaxSpv);
}

}  // namespace

const char* kernel_name(Kernel k) {
  static const char* const names[] = {
      "embed",           "rms_norm",        "rope",   "matmul", "matmul_rows", "matmul_tiled",
      "quant_act",       "matmul_dot",      "binary", "gather", "kv_store",    "attention",
      "attention_merge", "attention_tiled", "argmax", "top_k"};
  static_assert(sizeof(names) / sizeof(names[0]) == size_t(Kernel::kCount));
  return names[size_t(k)];
}

Kernels::Kernels(Context& ctx, bool subgroups, bool storage16, bool integer_dot) : ctx_(ctx) {
  try {
    create(subgroups, storage16, integer_dot);
  } catch (...) {
    release();
    throw;
  }
}

void Kernels::create(bool subgroups, bool storage16, bool integer_dot) {
  Context& ctx = ctx_;
  VkDevice dev = ctx.device();
  std::vector<VkDescriptorSetLayoutBinding> b(kBindings);
  for (uint32_t i = 0; i < kBindings; ++i) {
    b[i].binding = i;
    b[i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    b[i].descriptorCount = 1;
    b[i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  VkDescriptorSetLayoutCreateInfo li{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  li.bindingCount = kBindings;
  li.pBindings = b.data();
  check(vkCreateDescriptorSetLayout(dev, &li, nullptr, &set_layout_), "creating a set layout");
  VkPushConstantRange range{VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(PushConstants)};
  VkPipelineLayoutCreateInfo pi{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  pi.setLayoutCount = 1;
  pi.pSetLayouts = &set_layout_;
  pi.pushConstantRangeCount = 1;
  pi.pPushConstantRanges = &range;
  check(vkCreatePipelineLayout(dev, &pi, nullptr, &layout_), "creating a pipeline layout");

  for (size_t k = 0; k < pipelines_.size(); ++k) {
    if (!integer_dot && (Kernel(k) == Kernel::QuantAct || Kernel(k) == Kernel::MatMulDot)) continue;
    const Spirv code = code_of(Kernel(k), subgroups, storage16);
    VkShaderModuleCreateInfo mi{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
    mi.codeSize = code.bytes;
    mi.pCode = code.words;
    VkShaderModule module;
    check(vkCreateShaderModule(dev, &mi, nullptr, &module), "creating a shader module");
    VkComputePipelineCreateInfo ci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
    ci.stage.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO;
    ci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
    ci.stage.module = module;
    ci.stage.pName = "main";
    ci.layout = layout_;
    const VkResult r =
        vkCreateComputePipelines(dev, VK_NULL_HANDLE, 1, &ci, nullptr, &pipelines_[k]);
    vkDestroyShaderModule(dev, module, nullptr);
    if (r != VK_SUCCESS)
      fail("Vulkan: compiling the ", kernel_name(Kernel(k)), " shader for ", ctx.info().name,
           " failed (", result_name(r), ")");
  }
}

Kernels::~Kernels() {
  release();
}

void Kernels::release() {
  VkDevice dev = ctx_.device();
  for (VkPipeline p : pipelines_)
    if (p) vkDestroyPipeline(dev, p, nullptr);
  if (layout_) vkDestroyPipelineLayout(dev, layout_, nullptr);
  if (set_layout_) vkDestroyDescriptorSetLayout(dev, set_layout_, nullptr);
  pipelines_ = {};
  layout_ = VK_NULL_HANDLE;
  set_layout_ = VK_NULL_HANDLE;
}

}  // namespace hearth::vulkan
