#include "backends/vulkan/vulkan_backend.h"

#include "core/error.h"
#include "core/gpu_ops.h"

namespace hearth::vulkan {

VulkanBackend::VulkanBackend(const BackendOptions& opt) : kv_dtype_(opt.kv_dtype) {
  check_gpu_kv_dtype(opt.kv_dtype, "Vulkan");
  ContextOptions co;
  co.device = opt.device;
  co.validation = opt.vulkan.validation;
  co.max_binding_bytes = opt.vulkan.max_binding_bytes;
  co.storage16 = opt.vulkan.storage16;
  co.integer_dot = opt.vulkan.integer_dot;
  ctx_ = std::make_unique<Context>(co);
  subgroups_ = opt.vulkan.subgroups && ctx_->info().subgroup_arithmetic;
  kernels_ = std::make_unique<Kernels>(*ctx_, subgroups_, ctx_->storage16(), ctx_->integer_dot());
  dummy_ = Buffer(*ctx_, 16, false, "a placeholder binding");
}

VulkanBackend::~VulkanBackend() = default;

std::string VulkanBackend::describe() const {
  const DeviceInfo& d = ctx_->info();
  return "vulkan " + std::to_string(d.index) + ": " + d.name + " (" + d.type + ", Vulkan " +
         api_version_str(d.api_version) + (subgroups_ ? ", subgroups" : "") +
         (ctx_->storage16() ? ", 16-bit storage" : "") +
         (ctx_->integer_dot() ? ", integer dot products" : "") + ")";
}

bool VulkanBackend::supports_op(const Graph& g, const Node& n) const {
  return gpu_supports_op(g, n);
}

std::unique_ptr<CompiledGraph> VulkanBackend::compile(const Graph& g, int max_tokens,
                                                      int max_outputs) {
  check_gpu_graph(*this, g, "Vulkan", max_tokens, max_outputs);
  place_weights(g);
  auto c = std::make_unique<VkCompiled>(*ctx_);
  c->graph = &g;
  c->max_tokens = max_tokens;
  c->max_outputs = max_outputs;
  c->argmax_fused = true;
  plan_dispatches(g, *c);
  return c;
}

KVRoom VulkanBackend::kv_room(const Graph& g) const {
  return gpu_kv_room(g, ctx_->info().device_local_bytes, ctx_->info().max_storage_buffer_range);
}

std::unique_ptr<KVStorage> VulkanBackend::alloc_kv(const KVSpec& spec, int n_blocks,
                                                   int block_size) {
  auto kv = std::make_unique<VkKVStorage>();
  kv->spec = spec;
  kv->dtype = kv_dtype_;
  kv->n_blocks = n_blocks;
  kv->block_size = block_size;
  kv->serial = next_kv_serial_++;
  const VkDeviceSize layer_bytes = VkDeviceSize(n_blocks) * VkDeviceSize(block_size) *
                                   VkDeviceSize(spec.n_kv_heads) * VkDeviceSize(spec.head_dim) *
                                   dtype_size(kv_dtype_);
  if (layer_bytes > ctx_->info().max_storage_buffer_range)
    fail("Vulkan: the KV cache of one layer would take ", layer_bytes, " bytes (",
         int64_t(n_blocks) * block_size, " positions), more than the ",
         ctx_->info().max_storage_buffer_range, " one storage buffer may span on ",
         ctx_->info().name, "; ask for a shorter context (--ctx)");
  for (int l = 0; l < spec.n_layers; ++l) {
    kv->k.emplace_back(*ctx_, layer_bytes, false, "the KV cache");
    kv->v.emplace_back(*ctx_, layer_bytes, false, "the KV cache");
  }
  return kv;
}

void VulkanBackend::copy_kv_block(KVStorage& kv, int from, int to) {
  auto& s = static_cast<VkKVStorage&>(kv);
  const VkDeviceSize block = VkDeviceSize(s.block_size) * VkDeviceSize(s.spec.n_kv_heads) *
                             VkDeviceSize(s.spec.head_dim) * dtype_size(s.dtype);
  ctx_->run_once([&](VkCommandBuffer cmd) {
    VkBufferCopy region{VkDeviceSize(from) * block, VkDeviceSize(to) * block, block};
    for (size_t l = 0; l < s.k.size(); ++l) {
      vkCmdCopyBuffer(cmd, s.k[l].handle(), s.k[l].handle(), 1, &region);
      vkCmdCopyBuffer(cmd, s.v[l].handle(), s.v[l].handle(), 1, &region);
    }
  });
}

}  // namespace hearth::vulkan
