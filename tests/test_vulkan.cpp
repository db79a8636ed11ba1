// The Vulkan backend on the shared fixtures (lavapipe in CI): float64 reference logits in one pass
// and in chunks, exact greedy continuations through the scheduler, batched steps equal to lone
// ones; clear refusals of what it does not run; and the validation layer, which must report
// nothing, shown to be listening. Its ops against float64 are in test_ops.cpp.
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
#include "tests/vulkan_target.h"

using namespace hearth;
using namespace hearth::test;

namespace {

std::unique_ptr<Runner> vulkan_runner(const Qwen3Model& m, int chunk = 256, int block_size = 4,
                                      uint64_t max_binding_bytes = 0, DType kv = DType::F32) {
  RunnerOptions ro;
  ro.prefill_chunk = chunk;
  ro.block_size = block_size;
  ro.kv_budget_bytes = KVStorage::position_bytes(m.graph().kv, kv) * 4096;
  return std::make_unique<Runner>(vulkan_backend(kv, max_binding_bytes), m.graph(),
                                  m.config().vocab_size, m.config().max_position_embeddings, ro);
}

// One step of rows[i] for sequence i (each with its own cache from pos0[i]); the logits of each
// sequence's last row.
std::vector<float> step_last_logits(Runner& r, std::vector<KVCache*> caches,
                                    const std::vector<std::vector<int32_t>>& rows,
                                    const std::vector<int>& pos0) {
  std::vector<int32_t> tokens, out_rows;
  std::vector<SeqRows> seqs;
  for (size_t i = 0; i < rows.size(); ++i) {
    caches[i]->reserve(pos0[i] + int(rows[i].size()));
    SeqRows q;
    q.row0 = int(tokens.size());
    q.n_rows = int(rows[i].size());
    q.pos0 = pos0[i];
    q.blocks = caches[i]->blocks.data();
    q.n_blocks = int(caches[i]->blocks.size());
    seqs.push_back(q);
    tokens.insert(tokens.end(), rows[i].begin(), rows[i].end());
    out_rows.push_back(int32_t(tokens.size()) - 1);
  }
  std::vector<float> logits(rows.size() * size_t(r.vocab_size()));
  StepInputs in;
  in.tokens = tokens.data();
  in.n_tokens = int(tokens.size());
  in.seqs = seqs.data();
  in.n_seqs = int(seqs.size());
  in.out_rows = out_rows.data();
  in.n_out = int(out_rows.size());
  in.logits = logits.data();
  r.step(in);
  return logits;
}

}  // namespace

TEST_SUITE("vulkan") {
  TEST_CASE("fixture logits match the float64 reference, in one pass and in chunks") {
    if (!vulkan_device_here()) return;
    for (const char* fx : {kFixtures[0], kFixtures[1]}) {
      const std::string dir = kModels + fx;
      auto model = Qwen3Model::load(dir);
      const size_t V = size_t(model->config().vocab_size);
      auto runner = vulkan_runner(*model, 256);
      auto chunked_runner = vulkan_runner(*model, 7);  // 33 tokens = 7+7+7+7+5
      // As a device with 16 MiB bindings: the 19-39 MB embedding and LM head, and the 20 MB of
      // logits of a whole sequence, go in parts.
      auto split_runner = vulkan_runner(*model, 256, 4, 16 << 20);
      for (const auto& s : load_sequences(dir)) {
        CAPTURE(fx);
        CAPTURE(s.name);
        const auto want = read_f32(dir + "/" + s.logits_file);
        REQUIRE(want.size() == s.ids.size() * V);
        for (Runner* r : {runner.get(), chunked_runner.get(), split_runner.get()}) {
          CAPTURE(r->prefill_chunk());
          std::vector<float> got(want.size());
          auto kv = r->new_kv(int(s.ids.size()));
          r->forward(*kv, s.ids.data(), int(s.ids.size()), 0, got.data(), nullptr);
          double max_err;
          CHECK(count_mismatches(got, want, &max_err) == 0);
        }
      }
      check_validation_silent(runner->backend());
      check_validation_silent(chunked_runner->backend());
      check_validation_silent(split_runner->backend());
    }
  }

  TEST_CASE("16-bit KV caches stay close to the float64 reference, chunked or not") {
    if (!vulkan_device_here()) return;
    // The CPU backend's bounds (test_model_fixtures.cpp): loose multiples of what these caches
    // cost, while a wrong layout or rounding costs O(1).
    for (const char* fx : {kFixtures[0], kFixtures[1]}) {
      const std::string dir = kModels + fx;
      auto model = Qwen3Model::load(dir);
      const size_t V = size_t(model->config().vocab_size);
      const auto s = load_sequences(dir).back();
      const auto want = read_f32(dir + "/" + s.logits_file);
      for (auto [kvt, bound] : {std::pair{DType::F16, 1e-5}, {DType::BF16, 1e-4}})
        for (int chunk : {256, 7}) {
          CAPTURE(fx);
          CAPTURE(dtype_name(kvt));
          CAPTURE(chunk);
          auto runner = vulkan_runner(*model, chunk, 4, 0, kvt);
          const double worst = worst_kl_of_forward(*runner, s, want, V);
          CHECK(worst < bound);
          CHECK(worst > 0);  // the cache did round
          check_validation_silent(runner->backend());
        }
    }
  }

  TEST_CASE("greedy continuations through the scheduler are exact") {
    if (!vulkan_device_here()) return;
    for (const char* fx : {kFixtures[0], kFixtures[1]}) {
      const std::string dir = kModels + fx;
      auto model = Qwen3Model::load(dir);
      const auto seqs = load_sequences(dir);
      auto runner = vulkan_runner(*model);
      Scheduler sched(*runner);
      std::vector<Scheduler::Id> ids;
      for (const auto& s : seqs) {  // all at once: prefills and decodes share steps
        GenerateOptions o;
        o.max_new_tokens = int(s.greedy.size());
        o.ignore_eos = true;
        ids.push_back(sched.submit(s.ids, o));
      }
      std::vector<Scheduler::Event> events;
      for (int guard = 0; !sched.idle() && guard < 10000; ++guard) sched.step(events);
      REQUIRE(sched.idle());
      for (size_t i = 0; i < seqs.size(); ++i) {
        CAPTURE(fx);
        CAPTURE(seqs[i].name);
        CHECK(sched.take(ids[i]).tokens == seqs[i].greedy);
      }
      check_validation_silent(runner->backend());
    }
  }

  TEST_CASE("a batched step equals each of its sequences run alone") {
    if (!vulkan_device_here()) return;
    auto model = Qwen3Model::load(kModels + kFixtures[0]);
    const size_t V = size_t(model->config().vocab_size);
    for (int bs : {4, 16}) {
      CAPTURE(bs);
      auto runner = vulkan_runner(*model, 256, bs);
      const std::vector<std::vector<int32_t>> prefix = {{}, {11, 22, 33, 44, 55}, {7}};
      const std::vector<std::vector<int32_t>> rows = {{1, 2, 3}, {9}, {100, 200, 300, 400, 500, 6}};
      std::vector<std::unique_ptr<KVCache>> alone_kv, together_kv;
      std::vector<int> pos0;
      std::vector<float> scratch(V);
      for (size_t i = 0; i < rows.size(); ++i) {
        for (auto* caches : {&alone_kv, &together_kv}) {
          caches->push_back(runner->new_kv(64));
          if (!prefix[i].empty())
            runner->forward(*caches->back(), prefix[i].data(), int(prefix[i].size()), 0, nullptr,
                            scratch.data());
        }
        pos0.push_back(int(prefix[i].size()));
      }
      std::vector<float> alone;
      for (size_t i = 0; i < rows.size(); ++i) {
        auto l = step_last_logits(*runner, {alone_kv[i].get()}, {rows[i]}, {pos0[i]});
        alone.insert(alone.end(), l.begin(), l.end());
      }
      auto together = step_last_logits(
          *runner, {together_kv[0].get(), together_kv[1].get(), together_kv[2].get()}, rows, pos0);
      // Each output is computed by the same dispatches in the same order: bitwise equal.
      CHECK(std::memcmp(alone.data(), together.data(), alone.size() * 4) == 0);
      check_validation_silent(runner->backend());
    }
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
