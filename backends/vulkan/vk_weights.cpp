// Weights on the device: each graph weight copied once, in the checkpoint's own bytes, into
// device-local slabs of up to 1 GiB (fewer allocations than tensors; a device allows only so many).
#include <algorithm>
#include <vector>

#include "backends/vulkan/vulkan_backend.h"
#include "core/error.h"
#include "core/quant_format.h"

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
  struct Piece {
    const void* data;
    size_t bytes;
    const std::string* name;
  };
  std::vector<Piece> pending;
  VkDeviceSize left = 0;  // bytes still to place, so the last slab is no larger than needed
  auto want = [&](const void* data, size_t bytes, const std::string& name) {
    if (!data || weights_.count(data)) return;
    for (const Piece& p : pending)
      if (p.data == data) return;  // a tied table: one copy
    if (align_up(bytes, 4) > info.max_storage_buffer_range)
      fail("Vulkan: weight ", name, " is ", bytes, " bytes, more than the ",
           info.max_storage_buffer_range, " one storage buffer may span on ", info.name,
           " (splitting a weight across buffers is not implemented yet)");
    pending.push_back({data, bytes, &name});
    left += align_up(bytes, align);
  };
  for (const GraphTensor& t : g.tensors()) {
    if (t.kind != TensorKind::Weight) continue;
    want(t.weight.data, t.weight.nbytes, t.name);
    if (t.weight.quantized())
      want(t.weight.scales, quant::weight_bytes(t.weight) - t.weight.nbytes, t.name);
  }
  Uploader up(*ctx_);
  for (const Piece& p : pending) {
    const VkDeviceSize bytes = align_up(p.bytes, 4);
    if (slabs_.empty() || align_up(slabs_.back().used, align) + bytes > slabs_.back().buf.size()) {
      Slab s;
      s.buf =
          Buffer(*ctx_, std::max(bytes, std::min(slab_bytes, left)), false, "the model's weights");
      slabs_.push_back(std::move(s));
    }
    Slab& s = slabs_.back();
    const VkDeviceSize at = align_up(s.used, align);
    up.copy(s.buf, at, p.data, p.bytes);
    s.used = at + bytes;
    left -= align_up(p.bytes, align);
    weights_[p.data] = {s.buf.handle(), at, bytes};
  }
}

const WeightRef& VulkanBackend::weight(const void* data, const std::string& name) const {
  auto it = weights_.find(data);
  if (it == weights_.end()) fail("Vulkan: weight ", name, " was never uploaded");
  return it->second;
}

}  // namespace hearth::vulkan
