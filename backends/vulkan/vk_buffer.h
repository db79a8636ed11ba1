// A storage buffer with its own memory: device-local for weights, activations and the KV cache;
// host-visible (and mapped) for what a step writes or reads back. Move-only; frees itself.
#pragma once
#include <vulkan/vulkan.h>

#include <cstddef>

#include "backends/vulkan/vk_context.h"

namespace hearth::vulkan {

class Buffer {
 public:
  Buffer() = default;
  // `what` names the buffer in the error when the memory cannot be had.
  Buffer(Context& ctx, VkDeviceSize bytes, bool host_visible, const char* what);
  ~Buffer();
  Buffer(Buffer&& o) noexcept;
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  VkBuffer handle() const { return buf_; }
  VkDeviceSize size() const { return size_; }
  void* mapped() const { return mapped_; }  // host-visible buffers only

 private:
  void release();
  Context* ctx_ = nullptr;
  VkBuffer buf_ = VK_NULL_HANDLE;
  VkDeviceMemory mem_ = VK_NULL_HANDLE;
  VkDeviceSize size_ = 0;
  void* mapped_ = nullptr;
};

// Copies bytes from the host into device buffers through one host-visible staging buffer, in
// pieces of at most 64 MiB, waiting for each.
class Uploader {
 public:
  explicit Uploader(Context& ctx) : ctx_(ctx) {}
  void copy(const Buffer& dst, VkDeviceSize offset, const void* src, size_t bytes);

 private:
  Context& ctx_;
  Buffer staging_;
};

}  // namespace hearth::vulkan
