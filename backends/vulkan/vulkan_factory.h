// What core/backend_list.cpp needs to list the Vulkan backend, without Vulkan's headers.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"

namespace hearth::vulkan {

std::unique_ptr<Backend> make_vulkan_backend(const BackendOptions& opt);
bool vulkan_available();  // a loader, a driver and at least one device
// One line per device: index, name, type, Vulkan version, memory and limits.
std::vector<std::string> vulkan_devices();

}  // namespace hearth::vulkan
