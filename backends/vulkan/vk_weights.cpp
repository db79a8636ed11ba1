// Weights on the device: each graph weight copied once, in the checkpoint's own bytes, into
// device-local slabs of up to 1 GiB (fewer allocations than tensors; a device allows only so many);
// a weight larger than one binding may span goes in parts of whole rows (vk_compile.cpp splits its
// matmul or embedding to match).
#include <algorithm>
#include <map>
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

int64_t code_row_bytes(const Tensor& t) {
  return t.quantized() ? quant::row_code_bytes(quant::bits_of(t.dtype), t.cols())
                       : t.cols() * int64_t(dtype_size(t.dtype));
}

int64_t scale_row_bytes(const Tensor& t) {
  return t.quantized() ? t.cols() / t.group_size * 2 : 0;
}

}  // namespace

int64_t weight_rows_per_part(const Tensor& t, uint64_t range, const std::string& name) {
  const int64_t rows = std::max<int64_t>(t.rows(), 1), row = code_row_bytes(t);
  if (uint64_t(rows * row) <= range) return rows;
  // Parts of a multiple of 128 rows keep every part's offset aligned for any binding.
  const int64_t fit = int64_t(range) / row / 128 * 128;
  if (fit == 0)
    fail("Vulkan: 128 rows of weight ", name, " (", 128 * row,
         " bytes) exceed one storage-buffer binding of ", range, " bytes on this device");
  return fit;
}

void VulkanBackend::place_weights(const Graph& g) {
  const DeviceInfo& info = ctx_->info();
  const VkDeviceSize align = std::max<VkDeviceSize>(info.min_storage_offset_alignment, 16);
  const VkDeviceSize range = info.max_storage_buffer_range;
  const VkDeviceSize slab_bytes = std::min<VkDeviceSize>(kSlabBytes, range);
  struct Piece {
    const void* key;  // the host address the weight is known by (codes or scales)
    const uint8_t* src;
    size_t bytes;
    size_t part;
  };
  std::vector<Piece> pending;
  std::map<const void*, WeightRef> planned;
  VkDeviceSize left = 0;  // bytes still to place, so the last slab is no larger than needed
  auto want = [&](const void* key, int64_t rows, int64_t row_bytes, int64_t rows_per_part) {
    if (!key || weights_.count(key) || planned.count(key)) return;  // a tied table: one copy
    WeightRef& ref = planned[key];
    ref.rows_per_part = rows_per_part;
    for (int64_t r0 = 0; r0 < rows; r0 += rows_per_part) {
      const size_t bytes = size_t(std::min(rows_per_part, rows - r0) * row_bytes);
      pending.push_back(
          {key, static_cast<const uint8_t*>(key) + r0 * row_bytes, bytes, ref.parts.size()});
      ref.parts.emplace_back();
      left += align_up(bytes, align);
    }
  };
  for (const GraphTensor& t : g.tensors()) {
    if (t.kind != TensorKind::Weight) continue;
    const Tensor& w = t.weight;
    const int64_t rows = std::max<int64_t>(w.rows(), 1);
    const int64_t per_part = weight_rows_per_part(w, range, t.name);
    want(w.data, rows, code_row_bytes(w), per_part);
    if (w.quantized()) want(w.scales, rows, scale_row_bytes(w), per_part);
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
    up.copy(s.buf, at, p.src, p.bytes);
    s.used = at + bytes;
    left -= align_up(p.bytes, align);
    planned[p.key].parts[p.part] = {s.buf.handle(), at, bytes};
  }
  for (auto& [key, ref] : planned) weights_[key] = std::move(ref);
}

const WeightRef& VulkanBackend::weight(const void* data, const std::string& name) const {
  auto it = weights_.find(data);
  if (it == weights_.end()) fail("Vulkan: weight ", name, " was never uploaded");
  return it->second;
}

}  // namespace hearth::vulkan
