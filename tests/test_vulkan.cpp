// The Vulkan backend on the shared fixtures (lavapipe in CI; the checks every GPU backend passes,
// tests/gpu_fixture_checks.h), with 16 MiB bindings too; clear refusals of what it does not run;
// and the validation layer, which must report nothing, shown to be listening. Its ops against
// float64 are in test_ops.cpp.
#include <doctest/doctest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/error.h"
#include "core/runner.h"
#include "core/scheduler.h"
#include "models/qwen3_model.h"
#include "tests/fixture_models.h"
#include "tests/gpu_fixture_checks.h"
#include "tests/vulkan_target.h"

using namespace hearth;
using namespace hearth::test;

namespace {

std::unique_ptr<Runner> vulkan_runner(const Qwen3Model& m, int chunk = 256, int block_size = 4,
                                      uint64_t max_binding_bytes = 0, DType kv = DType::F32) {
  return gpu_runner(vulkan_backend(kv, max_binding_bytes), m, chunk, block_size, kv);
}

const MakeGpu kVulkan = [](DType kv) { return vulkan_backend(kv); };
const CheckGpu kSilent = [](const Backend& be) { check_validation_silent(be); };

}  // namespace

TEST_SUITE("vulkan") {
  TEST_CASE("fixture logits match the float64 reference, in one pass and in chunks") {
    if (!vulkan_device_here()) return;
    for (const char* fx : {kFixtures[0], kFixtures[1]}) {
      auto model = Qwen3Model::load(kModels + fx);
      auto runner = vulkan_runner(*model, 256);
      auto chunked_runner = vulkan_runner(*model, 7);  // 33 tokens = 7+7+7+7+5
      // As a device with 16 MiB bindings: the 19-39 MB embedding and LM head, and the 20 MB of
      // logits of a whole sequence, go in parts.
      auto split_runner = vulkan_runner(*model, 256, 4, 16 << 20);
      check_fixture_logits(kModels + fx, {runner.get(), chunked_runner.get(), split_runner.get()});
      check_validation_silent(runner->backend());
      check_validation_silent(chunked_runner->backend());
      check_validation_silent(split_runner->backend());
    }
  }

  TEST_CASE("16-bit KV caches stay close to the float64 reference, chunked or not") {
    if (!vulkan_device_here()) return;
    check_16bit_kv(kVulkan, kSilent);
  }

  TEST_CASE("greedy and sampled continuations through the scheduler are exact") {
    if (!vulkan_device_here()) return;
    check_scheduler_greedy(kVulkan, kSilent);
    check_scheduler_sampled(kVulkan, kSilent);
  }

  TEST_CASE("a batched step equals each of its sequences run alone") {
    if (!vulkan_device_here()) return;
    check_batched_equals_alone(kVulkan, kSilent);
    // A long step through the tiled matmul and attention against short ones: within rounding.
    check_batched_equals_alone(kVulkan, kSilent, 1e-5, true);
  }

  TEST_CASE("what it does not run is refused clearly when the graph is compiled") {
    if (!vulkan_device_here()) return;
    auto moe = Qwen3Model::load(kModels + kFixtures[2]);
    auto be = vulkan_backend();
    CHECK_THROWS_WITH_AS(be->compile(moe->graph(), 4, 1),
                         doctest::Contains("does not run Qwen3-MoE"), Error);
    BackendOptions o;
    o.kv_dtype = DType::I8;
    CHECK_THROWS_WITH_AS(create_backend("vulkan", o), doctest::Contains("not I8"), Error);
    o.kv_dtype = DType::F32;
    o.device = 99;
    CHECK_THROWS_WITH_AS(create_backend("vulkan", o), doctest::Contains("no device 99"), Error);
    check_validation_silent(*be);
  }

#ifdef HEARTH_HAVE_VULKAN
  TEST_CASE("the validation layer's reports are counted") {
    if (!vulkan_device_here()) return;
    auto be = vulkan_backend();
    auto& vk = dynamic_cast<vulkan::VulkanBackend&>(*be);
    REQUIRE(vk.validation_reports() == 0);
    // A zero-sized buffer is invalid usage (VUID-VkBufferCreateInfo-size-00912).
    VkBufferCreateInfo bi{};
    bi.sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO;
    bi.size = 0;
    bi.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT;
    VkBuffer buf = VK_NULL_HANDLE;
    if (vkCreateBuffer(vk.context().device(), &bi, nullptr, &buf) == VK_SUCCESS && buf)
      vkDestroyBuffer(vk.context().device(), buf, nullptr);
    CHECK(vk.validation_reports() > 0);
    CHECK(vk.first_validation_report().find("size") != std::string::npos);
  }
#endif

  TEST_CASE("devices are listed with their limits") {
    if (!vulkan_device_here()) return;
    for (const auto& f : backend_list())
      if (f.name == "vulkan") {
        const auto lines = f.devices();
        REQUIRE(!lines.empty());
        CHECK(lines[0].rfind("vulkan 0: ", 0) == 0);
        CHECK(lines[0].find("storage buffers up to") != std::string::npos);
      }
  }
}
