// The Vulkan backend on the shared fixtures (lavapipe in CI; the checks every GPU backend passes,
// tests/gpu_fixture_checks.h), with 16 MiB bindings too; quantized copies against the CPU's
// kernels; clear refusals of what it does not run;
// and the validation layer, which must report nothing, shown to be listening. Its ops against
// float64 are in test_ops.cpp.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "backends/cpu/cpu_features.h"
#include "core/backend.h"
#include "core/error.h"
#include "core/runner.h"
#include "core/scheduler.h"
#include "models/qwen3_model.h"
#include "models/standin.h"
#include "quant/quantizer.h"
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

// ||a - b|| / ||b||.
double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) num += double(a[i] - b[i]) * (a[i] - b[i]);
  for (float v : b) den += double(v) * v;
  return std::sqrt(num / den);
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

  TEST_CASE("a quantized checkpoint decodes as the CPU's kernels multiply it") {
    if (!vulkan_device_here()) return;
    // INT8 and INT4 copies of a small stand-in (every matrix at least 256 wide, as the integer-dot
    // shader takes them), decoded one token a step: on integer dot products the logits are the CPU
    // SIMD kernels' (the same int8 activations, FORMAT.md), and the fallback's are the scalar
    // kernels' (f32 products), each within float rounding; the two kinds differ by the
    // activations' rounding (~1% here), far more than either tolerance. The embedding stays BF16:
    // a Q8 one gives activations proportional to its integer codes, whose int8 rounding has exact
    // ties that one ulp of RMSNorm rounding decides either way.
    const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                      ("hearth_vulkan_quant_" + std::to_string(::getpid()));
    StandinSpec spec;
    spec.hidden = 256, spec.intermediate = 512, spec.layers = 2, spec.heads = 4, spec.kv_heads = 2;
    spec.head_dim = 64, spec.vocab = 512, spec.max_position = 64, spec.seed = 3;
    write_standin((dir / "f").string(), spec, "", 1);
    const std::vector<int32_t> ids = {1, 5, 9, 200, 33, 7, 81, 4, 400, 12};
    auto decode = [&](std::unique_ptr<Backend> be, const Qwen3Model& m) {
      auto r = gpu_runner(std::move(be), m);
      auto kv = r->new_kv(int(ids.size()));
      std::vector<float> all(ids.size() * size_t(m.config().vocab_size));
      r->forward(*kv, ids.data(), int(ids.size()), 0, all.data(), nullptr, 1);
      check_validation_silent(r->backend());
      return all;
    };
    auto cpu = [](const char* isa) {
      BackendOptions o;
      o.cpu.isa = isa;
      return create_backend("cpu", o);
    };
    for (int bits : {8, 4}) {
      CAPTURE(bits);
      quant::QuantizeOptions qo;
      qo.main = {bits, 32, DType::F16};
      qo.head = {16, 32, DType::F16};
      const std::string q = (dir / ("q" + std::to_string(bits))).string();
      quant::quantize_checkpoint((dir / "f").string(), q, qo);
      auto m = Qwen3Model::load(q);
      const auto floats = decode(vulkan_backend(DType::F32, 0, true, true, false), *m);
      const auto scalar = decode(cpu("scalar"), *m);
      CHECK(rel_error(floats, scalar) < 1e-5);
      auto be = vulkan_backend();
      if (!vulkan_integer_dot(*be)) {
        MESSAGE("integer-dot decode not checked: the Vulkan device has no integer dot products");
        continue;
      }
      const auto dots = decode(std::move(be), *m);
      const double drift = rel_error(dots, scalar);  // the activations' int8 rounding
      CHECK(drift > 1e-3);
      CHECK(drift < 3e-2);
      // AVX-512, AVX2 and NEON round the activations alike (FORMAT.md). A GPU's division and
      // RMSNorm may move one code by one where lavapipe's do not: 2e-3, well under the drift.
      if (cpu::detect_cpu_features().best() != cpu::Isa::Scalar)
        CHECK(rel_error(dots, decode(cpu(""), *m)) < 2e-3);
    }
    std::filesystem::remove_all(dir);
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

  TEST_CASE("the default context is what one binding holds of each layer's cache") {
    if (!vulkan_device_here()) return;
    auto m = Qwen3Model::load(kModels + kFixtures[0]);
    const auto& c = m->config();
    const size_t layer_position = size_t(c.num_key_value_heads) * size_t(c.head_dim) * 4;  // f32
    const uint64_t binding = 4096 * layer_position + 1000;  // 4096 positions and a bit
    const int max = c.max_position_embeddings;
    REQUIRE(size_t(max) * layer_position > binding);
    const int fit = fitting_positions(*vulkan_backend(DType::F32, binding), m->graph(), max);
    CHECK(fit == 4096);
    // The whole context does not fit: it is refused with advice, and what fits is allocated.
    CHECK_THROWS_WITH_AS(
        Runner(vulkan_backend(DType::F32, binding), m->graph(), c.vocab_size, max, RunnerOptions{}),
        doctest::Contains("--ctx"), Error);
    Runner r(vulkan_backend(DType::F32, binding), m->graph(), c.vocab_size, fit, RunnerOptions{});
    CHECK(r.kv_pool().n_blocks() * r.kv_pool().block_size() == fit);
    check_validation_silent(r.backend());
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
