#include "backends/vulkan/vk_context.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"

namespace hearth::vulkan {

namespace {

constexpr const char* kValidationLayer = "VK_LAYER_KHRONOS_validation";

const char* device_type_name(VkPhysicalDeviceType t) {
  switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU:
      return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU:
      return "CPU";
    default:
      return "other";
  }
}

bool has_extension(VkPhysicalDevice pd, const char* name) {
  uint32_t n = 0;
  if (vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, nullptr) != VK_SUCCESS) return false;
  std::vector<VkExtensionProperties> exts(n);
  if (vkEnumerateDeviceExtensionProperties(pd, nullptr, &n, exts.data()) != VK_SUCCESS)
    return false;
  for (const auto& e : exts)
    if (std::strcmp(e.extensionName, name) == 0) return true;
  return false;
}

DeviceInfo describe_device(VkPhysicalDevice pd, int index) {
  // Integer dot products through the extension: the instance asks for Vulkan 1.2, where 1.3's
  // core feature is not reachable.
  const bool dot_ext = has_extension(pd, VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME);
  VkPhysicalDeviceShaderIntegerDotProductProperties pdot{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_PROPERTIES};
  VkPhysicalDeviceSubgroupProperties sub{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES};
  if (dot_ext) sub.pNext = &pdot;
  VkPhysicalDeviceDriverProperties drv{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES};
  drv.pNext = &sub;
  VkPhysicalDeviceProperties2 props{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  props.pNext = &drv;
  vkGetPhysicalDeviceProperties2(pd, &props);
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  f11.pNext = &f12;
  VkPhysicalDeviceShaderIntegerDotProductFeatures fdot{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
  if (dot_ext) f12.pNext = &fdot;
  VkPhysicalDeviceFeatures2 feats{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  feats.pNext = &f11;
  vkGetPhysicalDeviceFeatures2(pd, &feats);
  VkPhysicalDeviceMemoryProperties mem;
  vkGetPhysicalDeviceMemoryProperties(pd, &mem);

  const auto& p = props.properties;
  DeviceInfo d;
  d.index = index;
  d.name = p.deviceName;
  d.type = device_type_name(p.deviceType);
  d.driver = std::string(drv.driverName) + " " + drv.driverInfo;
  d.api_version = p.apiVersion;
  d.max_storage_buffer_range = p.limits.maxStorageBufferRange;
  d.min_storage_offset_alignment = p.limits.minStorageBufferOffsetAlignment;
  d.max_shared_bytes = p.limits.maxComputeSharedMemorySize;
  d.subgroup_size = sub.subgroupSize;
  d.subgroup_arithmetic = (sub.supportedOperations & VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) &&
                          (sub.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT);
  for (uint32_t i = 0; i < mem.memoryHeapCount; ++i)
    if (mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT)
      d.device_local_bytes = std::max<uint64_t>(d.device_local_bytes, mem.memoryHeaps[i].size);
  d.shader_float16 = f12.shaderFloat16;
  d.storage_16bit = f11.storageBuffer16BitAccess;
  d.shader_int16 = feats.features.shaderInt16;
  d.integer_dot = dot_ext && fdot.shaderIntegerDotProduct;
  // The two forms matmul_dot.comp uses (OpSDot on Q8, OpSUDot on Q4), in hardware.
  d.integer_dot_accelerated = d.integer_dot &&
                              pdot.integerDotProduct4x8BitPackedSignedAccelerated &&
                              pdot.integerDotProduct4x8BitPackedMixedSignednessAccelerated;
  return d;
}

VkInstance make_instance(bool validation, bool debug_utils) {
  VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
  app.pApplicationName = "hearth";
  app.pEngineName = "hearth";
  app.apiVersion = VK_API_VERSION_1_2;
  VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
  ci.pApplicationInfo = &app;
  const char* layers[] = {kValidationLayer};
  const char* exts[] = {VK_EXT_DEBUG_UTILS_EXTENSION_NAME};
  if (validation) ci.enabledLayerCount = 1, ci.ppEnabledLayerNames = layers;
  if (debug_utils) ci.enabledExtensionCount = 1, ci.ppEnabledExtensionNames = exts;
  VkInstance inst = VK_NULL_HANDLE;
  const VkResult r = vkCreateInstance(&ci, nullptr, &inst);
  return r == VK_SUCCESS ? inst : VK_NULL_HANDLE;
}

std::vector<VkPhysicalDevice> physical_devices(VkInstance inst) {
  uint32_t n = 0;
  if (vkEnumeratePhysicalDevices(inst, &n, nullptr) != VK_SUCCESS) return {};
  std::vector<VkPhysicalDevice> v(n);
  if (vkEnumeratePhysicalDevices(inst, &n, v.data()) != VK_SUCCESS) return {};
  v.resize(n);
  return v;
}

bool has_layer(const char* name) {
  uint32_t n = 0;
  vkEnumerateInstanceLayerProperties(&n, nullptr);
  std::vector<VkLayerProperties> v(n);
  vkEnumerateInstanceLayerProperties(&n, v.data());
  for (const auto& l : v)
    if (std::string(l.layerName) == name) return true;
  return false;
}

int compute_queue_family(VkPhysicalDevice pd) {
  uint32_t n = 0;
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, nullptr);
  std::vector<VkQueueFamilyProperties> v(n);
  vkGetPhysicalDeviceQueueFamilyProperties(pd, &n, v.data());
  for (uint32_t i = 0; i < n; ++i)
    if (v[i].queueFlags & VK_QUEUE_COMPUTE_BIT) return int(i);
  return -1;
}

}  // namespace

const char* result_name(VkResult r) {
  switch (r) {
    case VK_SUCCESS:
      return "VK_SUCCESS";
    case VK_ERROR_OUT_OF_HOST_MEMORY:
      return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY:
      return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED:
      return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST:
      return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_LAYER_NOT_PRESENT:
      return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT:
      return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT:
      return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER:
      return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS:
      return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_TIMEOUT:
      return "VK_TIMEOUT";
    default:
      return "VkResult error";
  }
}

void check(VkResult r, const char* what) {
  if (r != VK_SUCCESS) fail("Vulkan: ", what, " failed (", result_name(r), ")");
}

std::string api_version_str(uint32_t v) {
  return std::to_string(VK_API_VERSION_MAJOR(v)) + "." + std::to_string(VK_API_VERSION_MINOR(v)) +
         "." + std::to_string(VK_API_VERSION_PATCH(v));
}

std::vector<DeviceInfo> list_devices() {
  VkInstance inst = make_instance(false, false);
  if (!inst) return {};
  std::vector<DeviceInfo> out;
  int i = 0;
  for (VkPhysicalDevice pd : physical_devices(inst)) out.push_back(describe_device(pd, i++));
  vkDestroyInstance(inst, nullptr);
  return out;
}

Context::Context(const ContextOptions& opt) {
  try {
    create_instance(opt.validation);
    create_device(opt.device, opt.storage16, opt.integer_dot);
    if (opt.max_binding_bytes && opt.max_binding_bytes < info_.max_storage_buffer_range)
      info_.max_storage_buffer_range = opt.max_binding_bytes;
  } catch (...) {
    release();
    throw;
  }
}

void Context::create_instance(bool validation) {
  if (validation && !has_layer(kValidationLayer))
    fail("Vulkan: the validation layer ", kValidationLayer,
         " is not installed (Debian: vulkan-validationlayers)");
  instance_ = make_instance(validation, validation);
  if (!instance_)
    fail(
        "Vulkan: no Vulkan 1.2 instance could be created (is a Vulkan driver installed? Debian: "
        "mesa-vulkan-drivers)");
  if (!validation) return;
  VkDebugUtilsMessengerCreateInfoEXT mi{VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT};
  mi.messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT;
  mi.messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                   VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                   VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT;
  mi.pfnUserCallback = &Context::on_report;
  mi.pUserData = this;
  auto create = reinterpret_cast<PFN_vkCreateDebugUtilsMessengerEXT>(
      vkGetInstanceProcAddr(instance_, "vkCreateDebugUtilsMessengerEXT"));
  if (!create) fail("Vulkan: VK_EXT_debug_utils is missing beside the validation layer");
  check(create(instance_, &mi, nullptr, &messenger_), "creating the validation messenger");
}

void Context::create_device(int index, bool storage16, bool integer_dot) {
  const auto devices = physical_devices(instance_);
  if (devices.empty())
    fail("Vulkan: no device found (VK_DRIVER_FILES may point at a missing driver)");
  if (index < 0 || size_t(index) >= devices.size())
    fail("Vulkan: no device ", index, " (this machine has ", devices.size(),
         "; `hearth devices` lists them)");
  physical_ = devices[size_t(index)];
  info_ = describe_device(physical_, index);
  if (info_.api_version < VK_API_VERSION_1_2)
    fail("Vulkan: device ", index, " (", info_.name, ") has Vulkan ",
         api_version_str(info_.api_version), "; hearth needs 1.2");
  const int family = compute_queue_family(physical_);
  if (family < 0) fail("Vulkan: device ", index, " (", info_.name, ") has no compute queue");
  vkGetPhysicalDeviceMemoryProperties(physical_, &memory_);

  const float priority = 1.f;
  VkDeviceQueueCreateInfo qi{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qi.queueFamilyIndex = uint32_t(family);
  qi.queueCount = 1;
  qi.pQueuePriorities = &priority;
  VkDeviceCreateInfo di{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  di.queueCreateInfoCount = 1;
  di.pQueueCreateInfos = &qi;
  // Only what the chosen shaders use: the validation layer checks each shader's capabilities
  // against what was enabled.
  VkPhysicalDeviceVulkan11Features f11{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES};
  VkPhysicalDeviceShaderIntegerDotProductFeatures fdot{
      VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_INTEGER_DOT_PRODUCT_FEATURES};
  VkPhysicalDeviceFeatures2 feats{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
  feats.pNext = &f11;
  di.pNext = &feats;
  storage16_ = storage16 && info_.storage_16bit && info_.shader_int16;
  if (storage16_) {
    f11.storageBuffer16BitAccess = VK_TRUE;
    feats.features.shaderInt16 = VK_TRUE;
  }
  integer_dot_ = integer_dot && info_.integer_dot;
  const char* dot_ext = VK_KHR_SHADER_INTEGER_DOT_PRODUCT_EXTENSION_NAME;
  if (integer_dot_) {
    fdot.shaderIntegerDotProduct = VK_TRUE;
    f11.pNext = &fdot;
    di.enabledExtensionCount = 1;
    di.ppEnabledExtensionNames = &dot_ext;
  }
  check(vkCreateDevice(physical_, &di, nullptr, &device_), "creating the logical device");
  vkGetDeviceQueue(device_, uint32_t(family), 0, &queue_);

  VkCommandPoolCreateInfo pi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pi.queueFamilyIndex = uint32_t(family);
  check(vkCreateCommandPool(device_, &pi, nullptr, &pool_), "creating a command pool");
  VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  check(vkCreateFence(device_, &fi, nullptr, &once_fence_), "creating a fence");
}

Context::~Context() {
  release();
}

void Context::release() {
  if (device_) {
    vkDeviceWaitIdle(device_);
    if (once_fence_) vkDestroyFence(device_, once_fence_, nullptr);
    if (pool_) vkDestroyCommandPool(device_, pool_, nullptr);
    vkDestroyDevice(device_, nullptr);
    device_ = VK_NULL_HANDLE;
  }
  if (messenger_) {
    auto destroy = reinterpret_cast<PFN_vkDestroyDebugUtilsMessengerEXT>(
        vkGetInstanceProcAddr(instance_, "vkDestroyDebugUtilsMessengerEXT"));
    if (destroy) destroy(instance_, messenger_, nullptr);
    messenger_ = VK_NULL_HANDLE;
  }
  if (instance_) vkDestroyInstance(instance_, nullptr);
  instance_ = VK_NULL_HANDLE;
}

uint32_t Context::memory_type(uint32_t type_bits, VkMemoryPropertyFlags need,
                              VkMemoryPropertyFlags prefer) const {
  int found = -1;
  for (uint32_t i = 0; i < memory_.memoryTypeCount; ++i) {
    if (!(type_bits & (1u << i))) continue;
    const VkMemoryPropertyFlags f = memory_.memoryTypes[i].propertyFlags;
    if ((f & need) != need) continue;
    if ((f & prefer) == prefer) return i;
    if (found < 0) found = int(i);
  }
  if (found < 0) fail("Vulkan: device ", info_.name, " has no memory type for a buffer");
  return uint32_t(found);
}

void Context::submit_and_wait(VkCommandBuffer cmd, VkFence fence) {
  std::lock_guard<std::mutex> lock(submit_mu_);
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cmd;
  check(vkQueueSubmit(queue_, 1, &si, fence), "submitting work");
  check(vkWaitForFences(device_, 1, &fence, VK_TRUE, UINT64_MAX), "waiting for the device");
  check(vkResetFences(device_, 1, &fence), "resetting a fence");
}

void Context::run_once(const std::function<void(VkCommandBuffer)>& record) {
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = pool_;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  VkCommandBuffer cmd;
  check(vkAllocateCommandBuffers(device_, &ai, &cmd), "allocating a command buffer");
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  try {
    check(vkBeginCommandBuffer(cmd, &bi), "recording commands");
    record(cmd);
    check(vkEndCommandBuffer(cmd), "recording commands");
    submit_and_wait(cmd, once_fence_);
  } catch (...) {
    vkFreeCommandBuffers(device_, pool_, 1, &cmd);
    throw;
  }
  vkFreeCommandBuffers(device_, pool_, 1, &cmd);
}

VKAPI_ATTR VkBool32 VKAPI_CALL Context::on_report(VkDebugUtilsMessageSeverityFlagBitsEXT severity,
                                                  VkDebugUtilsMessageTypeFlagsEXT,
                                                  const VkDebugUtilsMessengerCallbackDataEXT* data,
                                                  void* self) {
  auto* c = static_cast<Context*>(self);
  std::lock_guard<std::mutex> lock(c->report_mu_);
  if (c->reports_++ == 0 && data && data->pMessage)
    c->first_report_ =
        std::string(severity >= VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT ? "error: "
                                                                              : "warning: ") +
        data->pMessage;
  return VK_FALSE;
}

int Context::validation_reports() const {
  std::lock_guard<std::mutex> lock(report_mu_);
  return reports_;
}

std::string Context::first_validation_report() const {
  std::lock_guard<std::mutex> lock(report_mu_);
  return first_report_;
}

}  // namespace hearth::vulkan
