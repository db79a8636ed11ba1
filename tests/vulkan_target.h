// The Vulkan backend as a test target: whether this build has it and the loader finds a device
// (CI pins lavapipe, Mesa's CPU driver, with VK_DRIVER_FILES and sets HEARTH_REQUIRE_VULKAN=1,
// so there a missing device fails instead of skipping), and the check that the validation layer
// the tests run it under reported nothing.
#pragma once
#include <doctest/doctest.h>

#include <cstdlib>
#include <memory>
#include <string>

#include "core/backend.h"
#ifdef HEARTH_HAVE_VULKAN
#include "backends/vulkan/vulkan_backend.h"
#include "backends/vulkan/vulkan_factory.h"
#endif

namespace hearth::test {

inline bool vulkan_required() {
  const char* v = std::getenv("HEARTH_REQUIRE_VULKAN");
  return v && std::string(v) == "1";
}

// Says once why the Vulkan checks are skipped; fails instead when they are required.
inline bool vulkan_device_here() {
#ifdef HEARTH_HAVE_VULKAN
  static const bool here = vulkan::vulkan_available();
  const char* why = "no Vulkan device found (Debian: mesa-vulkan-drivers; VK_DRIVER_FILES)";
#else
  static const bool here = false;
  const char* why = "this build has no Vulkan backend (needs libvulkan-dev and glslc)";
#endif
  static bool said = false;
  if (!here && vulkan_required()) FAIL_CHECK("HEARTH_REQUIRE_VULKAN=1 but ", why);
  if (!here && !said) MESSAGE("Vulkan checks skipped: ", std::string(why));
  said = true;
  return here;
}

// The Vulkan backend under the validation layer (whose reports check_validation_silent reads).
// max_binding_bytes: pretend one binding spans no more (weights and logits then go in parts).
// subgroups false: the shared-memory reductions a device without subgroup arithmetic runs;
// storage16 false: 16-bit values as halves of words, as a device without 16-bit storage reads them;
// integer_dot false: quantized weights dequantized in the shader, as without integer dot products.
inline std::unique_ptr<Backend> vulkan_backend(DType kv = DType::F32,
                                               uint64_t max_binding_bytes = 0,
                                               bool subgroups = true, bool storage16 = true,
                                               bool integer_dot = true) {
  BackendOptions o;
  o.kv_dtype = kv;
  o.vulkan.validation = true;
  o.vulkan.subgroups = subgroups;
  o.vulkan.storage16 = storage16;
  o.vulkan.integer_dot = integer_dot;
  o.vulkan.max_binding_bytes = max_binding_bytes;
  return create_backend("vulkan", o);
}

// Whether the backend multiplies quantized weights on integer dot products (int8 activations).
inline bool vulkan_integer_dot(const Backend& be) {
#ifdef HEARTH_HAVE_VULKAN
  if (auto* v = dynamic_cast<const vulkan::VulkanBackend*>(&be)) return v->integer_dot();
#endif
  (void)be;
  return false;
}

inline void check_validation_silent(const Backend& be) {
#ifdef HEARTH_HAVE_VULKAN
  if (auto* v = dynamic_cast<const vulkan::VulkanBackend*>(&be))
    CHECK_MESSAGE(v->validation_reports() == 0, "validation layer: ", v->first_validation_report());
#endif
}

}  // namespace hearth::test
