#include "backends/vulkan/vk_buffer.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/error.h"

namespace hearth::vulkan {

Buffer::Buffer(Context& ctx, VkDeviceSize bytes, bool host_visible, const char* what)
    : ctx_(&ctx), size_(std::max<VkDeviceSize>(bytes, 16)) {
  VkBufferCreateInfo bi{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bi.size = size_;
  bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
             VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  bi.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  check(vkCreateBuffer(ctx.device(), &bi, nullptr, &buf_), "creating a buffer");
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(ctx.device(), buf_, &req);
  const VkMemoryPropertyFlags need =
      host_visible ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT : 0;
  const VkMemoryPropertyFlags prefer =
      host_visible ? VK_MEMORY_PROPERTY_HOST_CACHED_BIT : VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT;
  VkMemoryAllocateInfo ai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  ai.allocationSize = req.size;
  ai.memoryTypeIndex = ctx.memory_type(req.memoryTypeBits, need, prefer);
  const VkResult r = vkAllocateMemory(ctx.device(), &ai, nullptr, &mem_);
  if (r != VK_SUCCESS) {
    release();
    fail("Vulkan: out of ", host_visible ? "host-visible" : "device", " memory allocating ", bytes,
         " bytes for ", what, " on ", ctx.info().name, " (", result_name(r), ")");
  }
  check(vkBindBufferMemory(ctx.device(), buf_, mem_, 0), "binding buffer memory");
  if (host_visible)
    check(vkMapMemory(ctx.device(), mem_, 0, VK_WHOLE_SIZE, 0, &mapped_), "mapping");
}

void Buffer::release() {
  if (!ctx_) return;
  if (mapped_) vkUnmapMemory(ctx_->device(), mem_);
  if (buf_) vkDestroyBuffer(ctx_->device(), buf_, nullptr);
  if (mem_) vkFreeMemory(ctx_->device(), mem_, nullptr);
  buf_ = VK_NULL_HANDLE;
  mem_ = VK_NULL_HANDLE;
  mapped_ = nullptr;
}

Buffer::~Buffer() {
  release();
}

Buffer::Buffer(Buffer&& o) noexcept {
  *this = std::move(o);
}

Buffer& Buffer::operator=(Buffer&& o) noexcept {
  if (this != &o) {
    release();
    ctx_ = std::exchange(o.ctx_, nullptr);
    buf_ = std::exchange(o.buf_, VK_NULL_HANDLE);
    mem_ = std::exchange(o.mem_, VK_NULL_HANDLE);
    size_ = std::exchange(o.size_, 0);
    mapped_ = std::exchange(o.mapped_, nullptr);
  }
  return *this;
}

void Uploader::copy(const Buffer& dst, VkDeviceSize offset, const void* src, size_t bytes) {
  constexpr size_t kPiece = size_t(64) << 20;
  if (bytes == 0) return;
  if (staging_.size() < std::min(bytes, kPiece))
    staging_ = Buffer(ctx_, std::min(std::max<size_t>(bytes, size_t(1) << 20), kPiece), true,
                      "a staging buffer");
  const auto* p = static_cast<const uint8_t*>(src);
  for (size_t done = 0; done < bytes;) {
    const size_t n = std::min<size_t>(size_t(staging_.size()), bytes - done);
    std::memcpy(staging_.mapped(), p + done, n);
    ctx_.run_once([&](VkCommandBuffer cmd) {
      VkBufferCopy region{0, offset + done, n};
      vkCmdCopyBuffer(cmd, staging_.handle(), dst.handle(), 1, &region);
    });
    done += n;
  }
}

}  // namespace hearth::vulkan
