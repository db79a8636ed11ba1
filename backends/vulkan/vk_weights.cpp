// Weights on the device: each graph weight copied once, in the checkpoint's own bytes, into
// device-local slabs of up to 1 GiB (fewer allocations than tensors; a device allows only so many).
#include <algorithm>
#include <vector>

#include "backends/vulkan/vulkan_backend.h"
#include "core/error.h"

namespace hearth::vulkan {

namespace {

constexpr VkDeviceSize kSlabBytes = VkDeviceSize(1) << 30;

VkDeviceSize align_up(VkDeviceSize v, VkDeviceSize a) {
  return (v + a - 1) / a * a;
}

}  // namespace

void VulkanBackend::place_weights(const Graph& g) {
  const DeviceInfo& info = ctx_->info();
  const VkDeviceSize align = std::max<VkDeviceSize>(info.min_storage_offset_alignment, 16);
  const VkDeviceSize slab_bytes = std::min<VkDeviceSize>(kSlabBytes, info.max_storage_buffer_range);
  std::vector<const GraphTensor*> pending;
  VkDeviceSize left = 0;  // bytes still to place, so the last slab is no larger than needed
  for (const GraphTensor& t : g.tensors()) {
    if (t.kind != TensorKind::Weight || weights_.count(t.weight.data)) continue;
    if (std::any_of(pending.begin(), pending.end(),
                    [&](const GraphTensor* p) { return p->weight.data == t.weight.data; }))
      continue;  // a tied table: one copy
    if (align_up(t.weight.nbytes, 4) > info.max_storage_buffer_range)
      fail("Vulkan: weight ", t.name, " is ", t.weight.nbytes, " bytes, more than the ",
           info.max_storage_buffer_range, " one storage buffer may span on ", info.name,
           " (splitting a weight across buffers is not implemented yet)");
    pending.push_back(&t);
    left += align_up(t.weight.nbytes, align);
  }
  Uploader up(*ctx_);
  for (const GraphTensor* t : pending) {
    const VkDeviceSize bytes = align_up(t->weight.nbytes, 4);
    if (slabs_.empty() || align_up(slabs_.back().used, align) + bytes > slabs_.back().buf.size()) {
      Slab s;
      s.buf =
          Buffer(*ctx_, std::max(bytes, std::min(slab_bytes, left)), false, "the model's weights");
      slabs_.push_back(std::move(s));
    }
    Slab& s = slabs_.back();
    const VkDeviceSize at = align_up(s.used, align);
    up.copy(s.buf, at, t->weight.data, t->weight.nbytes);
    s.used = at + bytes;
    left -= align_up(t->weight.nbytes, align);
    weights_[t->weight.data] = {s.buf.handle(), at, bytes};
  }
}

const WeightRef& VulkanBackend::weight(const Graph& g, int id) const {
  auto it = weights_.find(g.tensor(id).weight.data);
  if (it == weights_.end()) fail("Vulkan: weight ", g.tensor(id).name, " was never uploaded");
  return it->second;
}

}  // namespace hearth::vulkan
