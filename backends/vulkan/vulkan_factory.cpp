#include "backends/vulkan/vulkan_factory.h"

#include <sstream>

#include "backends/vulkan/vulkan_backend.h"

namespace hearth::vulkan {

std::unique_ptr<Backend> make_vulkan_backend(const BackendOptions& opt) {
  return std::make_unique<VulkanBackend>(opt);
}

bool vulkan_available() {
  return !list_devices().empty();
}

std::vector<std::string> vulkan_devices() {
  std::vector<std::string> out;
  for (const DeviceInfo& d : list_devices()) {
    std::ostringstream os;
    os << "vulkan " << d.index << ": " << d.name << " (" << d.type << ", Vulkan "
       << api_version_str(d.api_version) << ", " << d.driver << "), "
       << d.device_local_bytes / (1 << 20) << " MiB device-local, storage buffers up to "
       << d.max_storage_buffer_range / (1 << 20) << " MiB, " << d.max_shared_bytes / 1024
       << " KiB shared, subgroup " << d.subgroup_size
       << (d.subgroup_arithmetic ? " with arithmetic" : "") << (d.shader_float16 ? ", float16" : "")
       << (d.storage_16bit ? ", 16-bit storage" : "")
       << (d.integer_dot ? d.integer_dot_accelerated ? ", integer dot products"
                                                     : ", integer dot products (not accelerated)"
                         : "");
    out.push_back(os.str());
  }
  return out;
}

}  // namespace hearth::vulkan
