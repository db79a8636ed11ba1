// The golden test: tiny Qwen3 checkpoints with float64 reference logits and greedy continuations
// from ../shared/fixtures/models, run on every ISA this machine has, chunked and unchunked.
#include <doctest/doctest.h>
#include <simdjson.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/runner.h"
#include "core/scheduler.h"
#include "core/session.h"
#include "models/qwen3_model.h"
#include "tests/fixture_models.h"

using namespace hearth;
using namespace hearth::test;
namespace fs = std::filesystem;

namespace {

// KV blocks of 4 positions unless told: the fixtures' sequences then span several blocks.
std::unique_ptr<Runner> make_runner(const Qwen3Model& m, const std::string& isa, int threads,
                                    int chunk = 256, DType kv = DType::F32, bool copies = false,
                                    int block_size = 4) {
  BackendOptions o;
  o.cpu.isa = isa;
  o.threads = threads;
  o.kv_dtype = kv;
  if (copies) o.cpu.weight_copies = std::make_shared<WeightStore>();
  RunnerOptions ro;
  ro.prefill_chunk = chunk;
  ro.block_size = block_size;
  return std::make_unique<Runner>(create_backend("cpu", o), m.graph(), m.config().vocab_size,
                                  m.config().max_position_embeddings, ro);
}

}  // namespace

TEST_SUITE("model_fixtures") {
  TEST_CASE("logits match the float64 reference on every ISA, chunked and unchunked") {
    for (const char* fx : kFixtures) {
      const std::string dir = kModels + fx;
      auto model = Qwen3Model::load(dir);
      const auto seqs = load_sequences(dir);
      const size_t V = size_t(model->config().vocab_size);
      for (const std::string& isa : isas_here()) {
        for (int threads : {1, 2}) {
          auto runner = make_runner(*model, isa, threads);
          for (const auto& s : seqs) {
            CAPTURE(fx);
            CAPTURE(isa);
            CAPTURE(threads);
            CAPTURE(s.name);
            const auto want = read_f32(dir + "/" + s.logits_file);
            REQUIRE(want.size() == s.ids.size() * V);
            std::vector<float> got(want.size());
            auto kv = runner->new_kv(int(s.ids.size()));
            runner->forward(*kv, s.ids.data(), int(s.ids.size()), 0, got.data(), nullptr);
            double max_err;
            CHECK(count_mismatches(got, want, &max_err) == 0);

            // The same sequence through the cache in two chunks (20 + rest), as the fixture says.
            if (s.ids.size() > 20) {
              std::vector<float> chunked(want.size());
              auto kv2 = runner->new_kv(int(s.ids.size()));
              runner->forward(*kv2, s.ids.data(), 20, 0, chunked.data(), nullptr);
              runner->forward(*kv2, s.ids.data() + 20, int(s.ids.size()) - 20, 20,
                              chunked.data() + 20 * V, nullptr);
              CHECK(count_mismatches(chunked, want, &max_err) == 0);
            }
          }
        }
      }
    }
  }

  TEST_CASE("copies mapped from a weight cache give the logits of copies made in memory") {
    const fs::path dir =
        fs::temp_directory_path() / ("hearth_wcache_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    for (const char* fx : {kFixtures[0], kFixtures[1], kFixtures[2]}) {
      CAPTURE(fx);
      auto model = Qwen3Model::load(kModels + fx);
      const Sequence s = load_sequences(kModels + fx)[0];
      // The logits of s, from a store without a cache (note null) or with one (its note).
      auto logits = [&](std::string* note) {
        auto store = std::make_shared<WeightStore>();
        if (note) {
          model->checkpoint().lend_mappings(*store);
          model->checkpoint().cache_weights(*store, dir.string(), "");
        }
        BackendOptions o;
        o.threads = 2;
        o.cpu.weight_copies = store;
        Runner r(create_backend("cpu", o), model->graph(), model->config().vocab_size, 64,
                 RunnerOptions{});
        r.prepare();
        if (note) *note = store->commit_cache();
        std::vector<float> got(s.ids.size() * size_t(model->config().vocab_size));
        auto kv = r.new_kv(int(s.ids.size()));
        r.forward(*kv, s.ids.data(), int(s.ids.size()), 0, got.data(), nullptr);
        return got;
      };
      const std::vector<float> want = logits(nullptr);
      std::string wrote, read;
      CHECK(logits(&wrote) == want);
      CHECK(logits(&read) == want);
      CHECK(wrote.find("wrote") == 0);
      CHECK(read.empty());  // mapped, not written again
    }
    fs::remove_all(dir);
  }

  TEST_CASE("prefill in small chunks equals one pass") {
    const std::string dir = kModels + kFixtures[0];
    auto model = Qwen3Model::load(dir);
    const auto seqs = load_sequences(dir);
    const auto& s = seqs.back();
    const auto want = read_f32(dir + "/" + s.logits_file);
    auto runner = make_runner(*model, "", 2, /*chunk=*/7);  // 33 tokens = 7+7+7+7+5
    std::vector<float> got(want.size());
    auto kv = runner->new_kv(int(s.ids.size()));
    runner->forward(*kv, s.ids.data(), int(s.ids.size()), 0, got.data(), nullptr);
    double max_err;
    CHECK(count_mismatches(got, want, &max_err) == 0);
  }

  TEST_CASE("16-bit and int8 KV caches stay close to the float64 reference, chunked or not") {
    // Per position, KL(reference || model) of the next-token distributions; the bounds are loose
    // multiples of what each cache type measures on these models (int8 about 2e-5 mean), while a
    // wrong scale or layout costs O(1).
    for (const char* fx : kFixtures) {
      const std::string dir = kModels + fx;
      auto model = Qwen3Model::load(dir);
      const auto seqs = load_sequences(dir);
      const size_t V = size_t(model->config().vocab_size);
      for (const std::string& isa : isas_here())
        for (auto [kvt, bound] :
             {std::pair{DType::F16, 1e-5}, {DType::BF16, 1e-4}, {DType::I8, 1e-3}})
          for (int chunk : {256, 7}) {
            CAPTURE(fx);
            CAPTURE(isa);
            CAPTURE(std::string(dtype_name(kvt)));
            CAPTURE(chunk);
            auto runner = make_runner(*model, isa, 2, chunk, kvt);
            const auto& s = seqs.back();
            const auto want = read_f32(dir + "/" + s.logits_file);
            const double worst = worst_kl_of_forward(*runner, s, want, V);
            CHECK(worst < bound);
            CHECK(worst >= 0);
          }
    }
  }

  TEST_CASE("greedy continuations are exact") {
    // With weight copies (--hugepages) a BF16 LM head is read through its screen.
    for (const char* fx : kFixtures) {
      const std::string dir = kModels + fx;
      auto model = Qwen3Model::load(dir);
      for (const std::string& isa : isas_here())
        for (bool copies : {false, true}) {
          auto runner = make_runner(*model, isa, 2, 256, DType::F32, copies);
          for (const auto& s : load_sequences(dir)) {
            CAPTURE(fx);
            CAPTURE(isa);
            CAPTURE(copies);
            CAPTURE(s.name);
            Engine engine(*runner);
            Session session(engine);
            GenerateOptions opt;
            opt.max_new_tokens = int(s.greedy.size());
            opt.ignore_eos = true;
            auto res = session.generate(s.ids, opt);
            CHECK(res.tokens == s.greedy);
            CHECK(res.finish_reason == "length");
          }
          if (copies && std::string(fx) == "tiny-tied-bf16")
            CHECK(runner->backend().argmax_bytes_saved() > 0);
          // ... and its BF16 matrices coded (bf16_coded.h) where a kernel reads them so.
          const bool bf16 = std::string(fx).find("bf16") != std::string::npos;
          if (copies && bf16 && isa == "avx512") CHECK(runner->backend().layout_bytes_saved() > 0);
        }
    }
  }

  TEST_CASE("top-k sampling through the screened head draws what the whole head draws") {
    // Three sequences, one greedy and two with Qwen3's sampling, one at a time (the screen reads
    // the head for one output row; a batched step reads it whole once for all): with weight
    // copies the head is screened and only each row's top-k logits (greedy: its argmax) are
    // computed; the tokens must be those of the whole head.
    const std::string dir = kModels + std::string("tiny-tied-bf16");
    auto model = Qwen3Model::load(dir);
    const auto seqs = load_sequences(dir);
    for (const std::string& isa : isas_here()) {
      std::vector<std::vector<int32_t>> got[2];
      for (bool copies : {false, true}) {
        CAPTURE(isa);
        BackendOptions o;
        o.cpu.isa = isa;
        o.threads = 2;
        if (copies) o.cpu.weight_copies = std::make_shared<WeightStore>();
        o.cpu.screen = CpuOptions::Screen::Always;  // not only while it is the faster
        RunnerOptions ro;
        ro.max_seqs = 1;
        Runner runner(create_backend("cpu", o), model->graph(), model->config().vocab_size,
                      model->config().max_position_embeddings, ro);
        Scheduler sched(runner);
        std::vector<Scheduler::Id> ids;
        for (int i = 0; i < 3; ++i) {
          GenerateOptions opt;
          opt.max_new_tokens = 24;
          opt.ignore_eos = true;
          if (i > 0) {
            opt.sampling.temperature = i == 1 ? 0.6f : 1.5f;  // 1.5: flatter, more rows in play
            opt.sampling.top_k = 20;
            opt.sampling.top_p = 0.95f;
            opt.sampling.seed = uint64_t(7 + i);
          }
          ids.push_back(sched.submit(seqs[size_t(i) % seqs.size()].ids, opt));
        }
        std::vector<Scheduler::Event> events;
        while (!sched.idle()) sched.step(events);
        for (auto id : ids) got[copies].push_back(sched.take(id).tokens);
        if (copies) CHECK(runner.backend().argmax_bytes_saved() > 0);
      }
      CHECK(got[0] == got[1]);
      CHECK(got[1][1] != got[1][2]);
    }
  }

  TEST_CASE("a session reuses its cache across turns") {
    const std::string dir = kModels + kFixtures[0];
    auto model = Qwen3Model::load(dir);
    auto runner = make_runner(*model, "", 1);
    const auto seqs = load_sequences(dir);
    const auto& s = seqs.back();
    Engine engine(*runner);
    Session session(engine);
    GenerateOptions opt;
    opt.max_new_tokens = 4;
    opt.ignore_eos = true;
    std::vector<int32_t> first(s.ids.begin(), s.ids.begin() + 20);
    auto r1 = session.generate(first, opt);
    CHECK(r1.metrics.prefill_tokens == 20);
    // Second turn: the whole sequence; only the tokens after the cached prefix are computed (the
    // first turn's 20 prompt tokens fill 5 blocks of 4).
    opt.max_new_tokens = int(s.greedy.size());
    auto r2 = session.generate(s.ids, opt);
    CHECK(r2.metrics.prefill_tokens == int(s.ids.size()) - 20);
    CHECK(r2.tokens == s.greedy);
  }
}
