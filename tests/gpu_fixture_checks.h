// The checks every GPU backend passes on the shared dense fixtures (test_vulkan.cpp on lavapipe,
// test_cuda.cpp on a lent GPU): float64 reference logits in one pass and in chunks, 16-bit KV
// caches within the CPU's KL bounds, exact greedy continuations through the scheduler, a batched
// step bitwise equal to its sequences run alone. Each takes a function making the backend under
// test for a KV type, and a check run on it at the end (the Vulkan validation layer's silence).
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/backend.h"
#include "core/runner.h"
#include "core/sampler.h"
#include "core/scheduler.h"
#include "models/qwen3_model.h"
#include "tests/fixture_models.h"

namespace hearth::test {

using MakeGpu = std::function<std::unique_ptr<Backend>(DType kv)>;
using CheckGpu = std::function<void(const Backend&)>;

inline std::unique_ptr<Runner> gpu_runner(std::unique_ptr<Backend> be, const Qwen3Model& m,
                                          int chunk = 256, int block_size = 4,
                                          DType kv = DType::F32) {
  RunnerOptions ro;
  ro.prefill_chunk = chunk;
  ro.block_size = block_size;
  ro.kv_budget_bytes = KVStorage::position_bytes(m.graph().kv, kv) * 4096;
  return std::make_unique<Runner>(std::move(be), m.graph(), m.config().vocab_size,
                                  m.config().max_position_embeddings, ro);
}

// Every sequence of the fixture in `dir` through each runner: all logits within the fixture's
// tolerance of the float64 reference.
inline void check_fixture_logits(const std::string& dir, const std::vector<Runner*>& runners) {
  auto model = Qwen3Model::load(dir);
  const size_t V = size_t(model->config().vocab_size);
  for (const auto& s : load_sequences(dir)) {
    CAPTURE(dir);
    CAPTURE(s.name);
    const auto want = read_f32(dir + "/" + s.logits_file);
    REQUIRE(want.size() == s.ids.size() * V);
    for (Runner* r : runners) {
      CAPTURE(r->prefill_chunk());
      std::vector<float> got(want.size());
      auto kv = r->new_kv(int(s.ids.size()));
      r->forward(*kv, s.ids.data(), int(s.ids.size()), 0, got.data(), nullptr);
      double max_err;
      CHECK(count_mismatches(got, want, &max_err) == 0);
    }
  }
}

// The CPU backend's bounds (test_model_fixtures.cpp): loose multiples of what these caches cost,
// while a wrong layout or rounding costs O(1).
inline void check_16bit_kv(const MakeGpu& make, const CheckGpu& after) {
  for (const char* fx : {kFixtures[0], kFixtures[1]}) {
    const std::string dir = kModels + fx;
    auto model = Qwen3Model::load(dir);
    const size_t V = size_t(model->config().vocab_size);
    const auto s = load_sequences(dir).back();
    const auto want = read_f32(dir + "/" + s.logits_file);
    for (auto [kvt, bound] : {std::pair{DType::F16, 1e-5}, {DType::BF16, 1e-4}})
      for (int chunk : {256, 7}) {
        CAPTURE(fx);
        CAPTURE(std::string(dtype_name(kvt)));
        CAPTURE(chunk);
        auto runner = gpu_runner(make(kvt), *model, chunk, 4, kvt);
        const double worst = worst_kl_of_forward(*runner, s, want, V);
        CHECK(worst < bound);
        CHECK(worst > 0);  // the cache did round
        after(runner->backend());
      }
  }
}

// Every sequence of seqs submitted at once with options(i), the scheduler run until idle (prefills
// and decodes share steps): each one's tokens.
inline std::vector<std::vector<int32_t>> run_scheduled(
    Runner& runner, const std::vector<Sequence>& seqs,
    const std::function<GenerateOptions(size_t)>& options) {
  Scheduler sched(runner);
  std::vector<Scheduler::Id> ids;
  for (size_t i = 0; i < seqs.size(); ++i) ids.push_back(sched.submit(seqs[i].ids, options(i)));
  std::vector<Scheduler::Event> events;
  for (int guard = 0; !sched.idle() && guard < 10000; ++guard) sched.step(events);
  REQUIRE(sched.idle());
  std::vector<std::vector<int32_t>> out;
  for (auto id : ids) out.push_back(sched.take(id).tokens);
  return out;
}

// The fixture's greedy continuations exactly, every sequence at once.
inline void check_scheduler_greedy(const MakeGpu& make, const CheckGpu& after) {
  for (const char* fx : {kFixtures[0], kFixtures[1]}) {
    const std::string dir = kModels + fx;
    auto model = Qwen3Model::load(dir);
    const auto seqs = load_sequences(dir);
    auto runner = gpu_runner(make(DType::F32), *model);
    const auto got = run_scheduled(*runner, seqs, [&](size_t i) {
      GenerateOptions o;
      o.max_new_tokens = int(seqs[i].greedy.size());
      o.ignore_eos = true;
      return o;
    });
    for (size_t i = 0; i < seqs.size(); ++i) {
      CAPTURE(fx);
      CAPTURE(seqs[i].name);
      CHECK(got[i] == seqs[i].greedy);
    }
    after(runner->backend());
  }
}

// Sampled continuations (Qwen3's temperature 0.6, top-k 20, top-p 0.95) through the scheduler,
// which asks the backend for each row's top 20 only, equal to a Sampler with the same seed fed
// every logit of the row by Runner::forward: the device's top-k must keep exactly what the
// sampler reads.
inline void check_scheduler_sampled(const MakeGpu& make, const CheckGpu& after) {
  for (const char* fx : {kFixtures[0], kFixtures[1]}) {
    const std::string dir = kModels + fx;
    auto model = Qwen3Model::load(dir);
    const auto seqs = load_sequences(dir);
    auto runner = gpu_runner(make(DType::F32), *model);
    const int V = runner->vocab_size(), n_new = 12;
    auto sampling = [](size_t i) {
      SamplingParams p;
      p.temperature = 0.6f, p.top_k = 20, p.top_p = 0.95f, p.seed = 100 + i;
      return p;
    };
    const auto got = run_scheduled(*runner, seqs, [&](size_t i) {
      GenerateOptions o;
      o.max_new_tokens = n_new;
      o.ignore_eos = true;
      o.sampling = sampling(i);
      return o;
    });
    for (size_t i = 0; i < seqs.size(); ++i) {
      CAPTURE(fx);
      CAPTURE(seqs[i].name);
      Sampler sampler(sampling(i), V);
      std::vector<int32_t> history = seqs[i].ids, want;
      std::vector<float> logits(static_cast<size_t>(V));
      auto kv = runner->new_kv(int(history.size()) + n_new);
      runner->forward(*kv, history.data(), int(history.size()), 0, nullptr, logits.data());
      for (int t = 0; t < n_new; ++t) {
        const int32_t tok = sampler.sample(logits.data(), V, history.data(), int(history.size()));
        want.push_back(tok);
        history.push_back(tok);
        runner->forward(*kv, &tok, 1, int(history.size()) - 1, nullptr, logits.data());
      }
      CHECK(got[i] == want);
    }
    after(runner->backend());
  }
}

// One step of rows[i] for sequence i (each with its own cache from pos0[i]); the logits of each
// sequence's last row.
inline std::vector<float> step_last_logits(Runner& r, std::vector<KVCache*> caches,
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

// Three sequences at different depths in one step, against each alone: bitwise equal where each
// output is computed by the same kernels in the same order (tolerance 0), else every logit within
// tolerance x the largest magnitude.
// long_rows: 20, 9 and 15 rows instead (a step of 44, which GPU backends run through their tiled
// prefill shaders, tiles straddling sequences, against three short steps).
inline void check_batched_equals_alone(const MakeGpu& make, const CheckGpu& after,
                                       double tolerance = 0, bool long_rows = false) {
  auto model = Qwen3Model::load(kModels + kFixtures[0]);
  const size_t V = size_t(model->config().vocab_size);
  for (int bs : {4, 16}) {
    CAPTURE(bs);
    auto runner = gpu_runner(make(DType::F32), *model, 256, bs);
    const std::vector<std::vector<int32_t>> prefix = {{}, {11, 22, 33, 44, 55}, {7}};
    std::vector<std::vector<int32_t>> rows = {{1, 2, 3}, {9}, {100, 200, 300, 400, 500, 6}};
    if (long_rows)
      for (size_t i = 0; i < 3; ++i) {
        rows[i].clear();
        for (int t = 0; t < int(i == 0 ? 20 : i == 1 ? 9 : 15); ++t)
          rows[i].push_back(int32_t(1 + (t * 37 + int(i) * 11) % 200));
      }
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
    if (tolerance == 0) {
      CHECK(std::memcmp(alone.data(), together.data(), alone.size() * 4) == 0);
    } else {
      double worst = 0, scale = 0;
      for (size_t i = 0; i < alone.size(); ++i) {
        worst = std::max(worst, double(std::abs(alone[i] - together[i])));
        scale = std::max(scale, double(std::abs(alone[i])));
      }
      CHECK(worst <= tolerance * scale);
    }
    after(runner->backend());
  }
}

}  // namespace hearth::test
