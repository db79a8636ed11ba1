// One Vulkan device as the backend uses it: an instance (with the Khronos validation layer and a
// messenger that counts its reports when asked for), the chosen physical device, a logical device
// with one compute queue and a command pool, memory-type choice and one-off submissions.
#pragma once
#include <vulkan/vulkan.h>

#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace hearth::vulkan {

// Throws hearth::Error "Vulkan: WHAT failed (VK_ERROR_...)" unless r is VK_SUCCESS.
void check(VkResult r, const char* what);
const char* result_name(VkResult r);

// What `hearth devices` prints and the backend checks its buffers against.
struct DeviceInfo {
  int index = 0;
  std::string name, type;  // type: "discrete GPU", "integrated GPU", "CPU", ...
  std::string driver;      // driver name and version info
  uint32_t api_version = 0;
  uint64_t max_storage_buffer_range = 0;  // bytes one storage-buffer binding may span
  uint64_t min_storage_offset_alignment = 0;
  uint64_t device_local_bytes = 0;  // the largest device-local heap
  uint32_t max_shared_bytes = 0;    // compute shared memory per workgroup
  uint32_t subgroup_size = 0;
  bool shader_float16 = false, storage_16bit = false, shader_int16 = false, integer_dot = false;
  bool subgroup_arithmetic = false;      // subgroupAdd and kin in compute shaders
  bool integer_dot_accelerated = false;  // the packed 4x8-bit dot products run in hardware
};
std::string api_version_str(uint32_t v);  // "1.3.230"

// The devices of every Vulkan driver the loader finds (VK_DRIVER_FILES pins one); empty when there
// is no loader, no driver or no device. Never throws.
std::vector<DeviceInfo> list_devices();

struct ContextOptions {
  int device = 0;
  bool validation = false;         // enable VK_LAYER_KHRONOS_validation and count what it reports
  uint64_t max_binding_bytes = 0;  // lowers DeviceInfo::max_storage_buffer_range (0: no change)
  bool storage16 = false;          // enable 16-bit storage and int16 where the device has both
  bool integer_dot = false;        // enable integer dot products where the device has them
};

class Context {
 public:
  explicit Context(const ContextOptions& opt);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  VkDevice device() const { return device_; }
  VkPhysicalDevice physical() const { return physical_; }
  const DeviceInfo& info() const { return info_; }
  // Whether 16-bit storage (and int16) is enabled: ContextOptions::storage16 on a device with both.
  bool storage16() const { return storage16_; }
  // Whether integer dot products are enabled: ContextOptions::integer_dot on a device with them.
  bool integer_dot() const { return integer_dot_; }
  VkCommandPool command_pool() const { return pool_; }

  // A memory type among type_bits with all of `need`, preferring one that also has `prefer`.
  uint32_t memory_type(uint32_t type_bits, VkMemoryPropertyFlags need,
                       VkMemoryPropertyFlags prefer) const;
  // Submits cmd and waits on `fence` (then resets it). Submissions are serialised.
  void submit_and_wait(VkCommandBuffer cmd, VkFence fence);
  // Records into a one-off command buffer, submits it and waits.
  void run_once(const std::function<void(VkCommandBuffer)>& record);

  // Errors and warnings the validation layer reported so far, and the first of them.
  int validation_reports() const;
  std::string first_validation_report() const;

 private:
  static VKAPI_ATTR VkBool32 VKAPI_CALL on_report(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                  VkDebugUtilsMessageTypeFlagsEXT type,
                                                  const VkDebugUtilsMessengerCallbackDataEXT* data,
                                                  void* self);
  void create_instance(bool validation);
  void create_device(int index, bool storage16, bool integer_dot);
  void release();  // what the destructor frees, also after a failed constructor

  VkInstance instance_ = VK_NULL_HANDLE;
  VkDebugUtilsMessengerEXT messenger_ = VK_NULL_HANDLE;
  VkPhysicalDevice physical_ = VK_NULL_HANDLE;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkFence once_fence_ = VK_NULL_HANDLE;
  VkPhysicalDeviceMemoryProperties memory_{};
  DeviceInfo info_;
  bool storage16_ = false, integer_dot_ = false;
  std::mutex submit_mu_;
  mutable std::mutex report_mu_;
  int reports_ = 0;
  std::string first_report_;
};

}  // namespace hearth::vulkan
