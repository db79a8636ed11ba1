// The paged, batched engine core: a batched Runner::step equals each of its sequences run alone
// (every ISA, KV dtype and two block sizes); the Scheduler reproduces the fixtures' greedy
// continuations; prefix sharing computes less and changes nothing; preemption and cancellation
// change no other token; KVPool bookkeeping (refs, publish/match, LRU eviction, a real hash
// collision); a random soak leaks no block; sessions of one model share one thread pool.
#include <dirent.h>
#include <doctest/doctest.h>
#include <simdjson.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/error.h"
#include "core/kv_pool.h"
#include "core/runner.h"
#include "core/scheduler.h"
#include "core/session.h"
#include "hearth.h"
#include "models/qwen3_model.h"
#include "tests/fixture_models.h"

using namespace hearth;
using namespace hearth::test;

namespace {

// A CPU backend that reports a given KV room, as a device with that much memory would.
struct RoomBackend : cpu::CpuBackend {
  RoomBackend(const BackendOptions& o, KVRoom room) : CpuBackend(o), room(room) {}
  KVRoom kv_room(const Graph&) const override { return room; }
  KVRoom room;
};

struct RunnerSpec {
  std::string isa;  // empty: best
  int threads = 1;
  DType kv = DType::F32;
  int block_size = 4;
  int prefill_chunk = 256;
  int max_seqs = 16;
  int kv_blocks = 0;  // 0: the runner's default (the model's whole context once)
  // An FP32 GEMM for long steps. The default ("auto") rounds the activations of BF16 weights to
  // bf16 in steps of 64 rows or more where bf16 dot products are fast (README, `--gemm`), so there
  // a sequence's logits depend on how many rows it shares a step with, by design; these tests
  // check that batching, sharing and preemption change nothing, which needs FP32 steps.
  std::string gemm = "native";
};

std::unique_ptr<Runner> make_runner(const Qwen3Model& m, const RunnerSpec& s) {
  BackendOptions o;
  o.cpu.isa = s.isa;
  o.cpu.gemm = s.gemm;
  o.threads = s.threads;
  o.kv_dtype = s.kv;
  RunnerOptions ro;
  ro.prefill_chunk = s.prefill_chunk;
  ro.max_seqs = s.max_seqs;
  ro.block_size = s.block_size;
  if (s.kv_blocks > 0)
    ro.kv_budget_bytes =
        KVStorage::position_bytes(m.graph().kv, s.kv) * size_t(s.block_size) * size_t(s.kv_blocks);
  auto r = std::make_unique<Runner>(create_backend("cpu", o), m.graph(), m.config().vocab_size,
                                    m.config().max_position_embeddings, ro);
  if (s.kv_blocks > 0) REQUIRE(r->kv_pool().n_blocks() == s.kv_blocks);
  return r;
}

// Rows of logits are compared by their largest difference relative to the reference row's largest
// magnitude. A batched step and a lone one may sum in other orders (another compiled step size,
// another split over threads), which moves a logit by a few ulps of the row's scale, not of its
// own value: a per-element relative error blows up at logits near zero, which say nothing. The
// logits are O(1) (max |logit| about 4) and real bugs (a wrong block, position or row) move them
// by 0.1 or more, so 1e-5 of the row's scale is tight and still far above rounding.
double row_rel_diff(const float* got, const float* want, size_t n) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = std::fabs(double(got[i]) - double(want[i]));
    diff = std::max(diff, std::isnan(d) ? 1e30 : d);
    scale = std::max(scale, std::fabs(double(want[i])));
  }
  return diff / std::max(scale, 1e-30);
}

int32_t first_argmax(const float* x, size_t n) {
  float best = -INFINITY;
  int32_t arg = -1;
  for (size_t i = 0; i < n; ++i)
    if (x[i] > best) best = x[i], arg = int32_t(i);
  return arg;
}

// The gap between the two largest logits, relative to the row's largest magnitude: argmax must
// agree between computations equal to 1e-5 only where the gap is wider than that.
double top2_gap(const float* x, size_t n) {
  double a = -INFINITY, b = -INFINITY, scale = 0;
  for (size_t i = 0; i < n; ++i) {
    const double v = x[i];
    if (v > a)
      b = a, a = v;
    else if (v > b)
      b = v;
    scale = std::max(scale, std::fabs(v));
  }
  return (a - b) / std::max(scale, 1e-30);
}

std::vector<int32_t> random_ids(std::mt19937& rng, int n, int vocab) {
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& t : v) t = d(rng);
  return v;
}

// Submits every prompt, steps until idle, and returns each request's result (in submission
// order). Checks that the streamed events agree with the results.
std::vector<GenerationResult> run_all(Scheduler& sched,
                                      const std::vector<std::vector<int32_t>>& prompts,
                                      const std::vector<GenerateOptions>& opts) {
  std::vector<Scheduler::Id> ids;
  for (size_t i = 0; i < prompts.size(); ++i) ids.push_back(sched.submit(prompts[i], opts[i]));
  std::map<Scheduler::Id, std::vector<int32_t>> streamed;
  std::set<Scheduler::Id> finished;
  std::vector<Scheduler::Event> ev;
  for (int guard = 0; !sched.idle(); ++guard) {
    REQUIRE(guard < 100000);
    ev.clear();
    REQUIRE(sched.step(ev));
    for (const auto& e : ev) {
      CHECK(finished.count(e.id) == 0);
      if (e.finished)
        finished.insert(e.id);
      else
        streamed[e.id].push_back(e.token);
    }
  }
  std::vector<GenerationResult> out;
  for (Scheduler::Id id : ids) {
    CHECK(finished.count(id) == 1);
    out.push_back(sched.take(id));
    CHECK(out.back().tokens == streamed[id]);
  }
  return out;
}

GenerateOptions greedy_opts(int max_new) {
  GenerateOptions o;
  o.max_new_tokens = max_new;
  o.ignore_eos = true;
  return o;
}

GenerateOptions sampled_opts(int max_new, uint64_t seed) {
  GenerateOptions o = greedy_opts(max_new);
  o.sampling.temperature = 0.8f;
  o.sampling.top_k = 20;
  o.sampling.seed = seed;
  return o;
}

int count_threads() {
  int n = 0;
  DIR* d = opendir("/proc/self/task");
  REQUIRE(d != nullptr);
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n;
}

// Runs 1, 3 and 16 sequences (prompt rows 1..40, some first fed alone up to position 1..30, all
// with their own blocks) through one batched step, and each alone; see row_rel_diff for the bound.
void check_batched_equals_alone(Runner& runner, DType kv, unsigned seed, std::vector<int> counts) {
  const int V = runner.vocab_size();
  const size_t Vs = size_t(V);
  const int kMaxRows = 40, kMaxPre = 30;
  std::mt19937 rng(seed);
  // With FP32 long steps a batched step is even bitwise equal to lone ones here; 1e-5 of the
  // row's scale leaves room for another summation order, and also holds for lossy caches only
  // while batching changes no f32 value before the cache rounds it.
  const double tol = 1e-5;
  for (int n_seqs : counts) {
    CAPTURE(n_seqs);
    // Sequences with their own caches; some first fed alone up to a random position.
    std::vector<std::unique_ptr<KVCache>> caches;
    std::vector<std::vector<int32_t>> rows;
    std::vector<int> pos0;
    std::vector<float> scratch(Vs);
    for (int i = 0; i < n_seqs; ++i) {
      const int pre = (i % 2) ? int(rng() % kMaxPre) + 1 : 0;
      const int n = int(rng() % kMaxRows) + 1;
      caches.push_back(runner.new_kv(pre + n));
      if (pre) {
        const auto prefix = random_ids(rng, pre, V);
        runner.forward(*caches.back(), prefix.data(), pre, 0, nullptr, scratch.data());
      }
      caches.back()->reserve(pre + n);
      rows.push_back(random_ids(rng, n, V));
      pos0.push_back(pre);
    }

    // Alone: one SeqRows per step, logits and fused argmax of its last row.
    std::vector<float> alone(size_t(n_seqs) * Vs);
    std::vector<int32_t> alone_arg(static_cast<size_t>(n_seqs));
    for (int i = 0; i < n_seqs; ++i) {
      SeqRows q;
      q.n_rows = int(rows[size_t(i)].size());
      q.pos0 = pos0[size_t(i)];
      q.blocks = caches[size_t(i)]->blocks.data();
      q.n_blocks = int(caches[size_t(i)]->blocks.size());
      const int32_t last = q.n_rows - 1;
      StepInputs in;
      in.tokens = rows[size_t(i)].data();
      in.n_tokens = q.n_rows;
      in.seqs = &q;
      in.n_seqs = 1;
      in.out_rows = &last;
      in.n_out = 1;
      in.logits = alone.data() + size_t(i) * Vs;
      runner.step(in);
      if (kv == DType::F32) {  // the fused argmax does not depend on the cache type
        in.logits = nullptr;
        in.argmax = &alone_arg[size_t(i)];
        runner.step(in);
      }
    }

    // Together: all rows in one step, one output row per sequence (its last).
    std::vector<int32_t> tokens, out_rows;
    std::vector<SeqRows> seqs;
    for (int i = 0; i < n_seqs; ++i) {
      SeqRows q;
      q.row0 = int(tokens.size());
      q.n_rows = int(rows[size_t(i)].size());
      q.pos0 = pos0[size_t(i)];
      q.blocks = caches[size_t(i)]->blocks.data();
      q.n_blocks = int(caches[size_t(i)]->blocks.size());
      seqs.push_back(q);
      tokens.insert(tokens.end(), rows[size_t(i)].begin(), rows[size_t(i)].end());
      out_rows.push_back(int32_t(tokens.size()) - 1);
    }
    std::vector<float> together(size_t(n_seqs) * Vs);
    std::vector<int32_t> together_arg(size_t(n_seqs), -2);
    StepInputs in;
    in.tokens = tokens.data();
    in.n_tokens = int(tokens.size());
    in.seqs = seqs.data();
    in.n_seqs = n_seqs;
    in.out_rows = out_rows.data();
    in.n_out = n_seqs;
    in.logits = together.data();
    runner.step(in);
    if (kv == DType::F32) {
      in.logits = nullptr;
      in.argmax = together_arg.data();
      runner.step(in);
    }

    for (int i = 0; i < n_seqs; ++i) {
      CAPTURE(i);
      CAPTURE(pos0[size_t(i)]);
      CAPTURE(rows[size_t(i)].size());
      const float* want = alone.data() + size_t(i) * Vs;
      const float* got = together.data() + size_t(i) * Vs;
      CHECK(row_rel_diff(got, want, Vs) <= tol);
      if (top2_gap(want, Vs) > 2 * tol) {
        CHECK(first_argmax(got, Vs) == first_argmax(want, Vs));
        if (kv == DType::F32) {
          CHECK(together_arg[size_t(i)] == alone_arg[size_t(i)]);
          CHECK(alone_arg[size_t(i)] == first_argmax(want, Vs));
        }
      }
    }
  }
}

}  // namespace

TEST_SUITE("engine") {
  TEST_CASE("a batched step equals each of its sequences run alone") {
    const int kMaxSeqs = 16, kMaxRows = 40, kMaxPre = 30;
    auto spec_for = [&](const std::string& isa, DType kv, int bs) {
      RunnerSpec spec;
      spec.isa = isa;
      spec.threads = 2;  // rows and heads split over threads: a second way to go wrong
      spec.kv = kv;
      spec.block_size = bs;
      spec.prefill_chunk = kMaxSeqs * kMaxRows;
      spec.max_seqs = kMaxSeqs;
      spec.kv_blocks = kMaxSeqs * ((kMaxPre + kMaxRows + bs - 1) / bs + 1);
      return spec;
    };
    {
      auto model = Qwen3Model::load(kModels + kFixtures[0]);
      for (const std::string& isa : isas_here())
        for (DType kv : {DType::F32, DType::F16, DType::BF16, DType::I8})
          for (int bs : {4, 16}) {
            // Scalar kernels are slow: one block size for the lossy caches.
            if (isa == "scalar" && kv != DType::F32 && bs == 16) continue;
            CAPTURE(isa);
            const std::string kv_name = dtype_name(kv);
            CAPTURE(kv_name);
            CAPTURE(bs);
            auto runner = make_runner(*model, spec_for(isa, kv, bs));
            check_batched_equals_alone(
                *runner, kv, unsigned(1234 + bs * 7 + int(kv) * 31),
                isa == "scalar" ? std::vector<int>{3, 16} : std::vector<int>{1, 3, 16});
          }
    }
    // The default GEMM for long steps, with F32 weights (FP32 on every CPU).
    auto model = Qwen3Model::load(kModels + kFixtures[1]);
    for (int bs : {4, 16}) {
      CAPTURE(bs);
      RunnerSpec spec = spec_for("", DType::F32, bs);
      spec.gemm = "";
      auto runner = make_runner(*model, spec);
      check_batched_equals_alone(*runner, DType::F32, unsigned(99 + bs), {3, 16});
    }
  }

  TEST_CASE("the scheduler reproduces the fixtures' greedy continuations") {
    for (const char* fx : kFixtures) {
      const std::string dir = kModels + fx;
      auto model = Qwen3Model::load(dir);
      const auto seqs = load_sequences(dir);
      for (const std::string& isa : isas_here())
        for (int batch_tokens : {256, 8}) {  // 8: prompts prefilled in chunks beside decodes
          if (batch_tokens == 8 && isa != isas_here().back()) continue;  // slow, and ISA-blind
          const std::string fx_name = fx;
          CAPTURE(fx_name);
          CAPTURE(isa);
          CAPTURE(batch_tokens);
          RunnerSpec spec;
          spec.isa = isa;
          spec.threads = 2;
          auto runner = make_runner(*model, spec);
          SchedulerOptions so;
          so.max_batch_tokens = batch_tokens;
          Scheduler sched(*runner, so);
          // Every sequence twice: the second copies may find the first's published blocks.
          std::vector<std::vector<int32_t>> prompts;
          std::vector<GenerateOptions> opts;
          for (int rep = 0; rep < 2; ++rep)
            for (const auto& s : seqs) {
              prompts.push_back(s.ids);
              opts.push_back(greedy_opts(int(s.greedy.size())));
            }
          const auto res = run_all(sched, prompts, opts);
          for (size_t i = 0; i < res.size(); ++i) {
            CAPTURE(seqs[i % seqs.size()].name);
            CHECK(res[i].finish_reason == "length");
            CHECK(res[i].tokens == seqs[i % seqs.size()].greedy);
            CHECK(res[i].metrics.prompt_tokens == int(prompts[i].size()));
          }
          CHECK(runner->kv_pool().used() == 0);
        }
    }
  }

  TEST_CASE("prefix sharing computes only what is not cached and changes nothing") {
    auto model = Qwen3Model::load(kModels + kFixtures[0]);
    const int V = model->config().vocab_size;
    const size_t Vs = size_t(V);
    const int bs = 16;
    std::mt19937 rng(77);
    const auto prefix = random_ids(rng, 40, V);
    auto a = prefix, b = prefix;
    const auto a_tail = random_ids(rng, 8, V), b_tail = random_ids(rng, 5, V);
    a.insert(a.end(), a_tail.begin(), a_tail.end());  // 48 tokens: exactly three blocks
    b.insert(b.end(), b_tail.begin(), b_tail.end());  // 45: shares blocks 0 and 1 with a
    RunnerSpec spec;
    spec.threads = 2;
    spec.block_size = bs;

    SUBCASE("through the scheduler") {
      for (bool sampled : {false, true}) {
        CAPTURE(sampled);
        const GenerateOptions opt = sampled ? sampled_opts(12, 5) : greedy_opts(12);
        auto runner = make_runner(*model, spec);
        Scheduler sched(*runner);
        const auto ra = run_all(sched, {a}, {opt})[0];
        CHECK(ra.metrics.prefill_tokens == 48);
        // b: blocks 0 and 1 (tokens 0..31) are a's; block 2 differs from position 40 on.
        const auto rb = run_all(sched, {b}, {opt})[0];
        CHECK(rb.metrics.prefill_tokens == 45 - 32);
        // a again: all three blocks are cached, but its last token is computed for its logits,
        // so the third block is recomputed.
        const auto ra2 = run_all(sched, {a}, {opt})[0];
        CHECK(ra2.metrics.prefill_tokens == 48 - 32);
        CHECK(ra2.tokens == ra.tokens);
        // a and its first 8 generated tokens: the first three blocks come from the cache.
        auto a_next = a;
        a_next.insert(a_next.end(), ra.tokens.begin(), ra.tokens.begin() + 8);
        const auto ran = run_all(sched, {a_next}, {opt})[0];
        CHECK(ran.metrics.prefill_tokens == 56 - 48);
        CHECK(runner->kv_pool().hits() >= 2 + 2 + 3);

        // The same requests on fresh runners: nothing shared.
        for (const auto& [p, want] : {std::pair{&b, &rb}, {&a_next, &ran}}) {
          auto fresh = make_runner(*model, spec);
          Scheduler s2(*fresh);
          const auto r = run_all(s2, {*p}, {opt})[0];
          CHECK(r.metrics.prefill_tokens == int(p->size()));
          CHECK(r.tokens == want->tokens);
        }
        // Greedy: a continued with its own tokens continues as a did.
        if (!sampled)
          CHECK(std::equal(ran.tokens.begin(), ran.tokens.begin() + 4, ra.tokens.begin() + 8));
      }
    }

    SUBCASE("logits over shared blocks equal an unshared computation") {
      auto runner = make_runner(*model, spec);
      KVPool& pool = runner->kv_pool();
      std::vector<float> scratch(Vs);
      auto kva = runner->new_kv(48);
      runner->forward(*kva, a.data(), 48, 0, nullptr, scratch.data());
      const uint64_t h0 = pool.publish(kva->blocks[0], KVPool::kRootHash, a.data());
      const uint64_t h1 = pool.publish(kva->blocks[1], h0, a.data() + bs);
      CHECK(h1 == KVPool::hash_block(h0, a.data() + bs, bs));
      // b's table: a's first two blocks, then one of its own.
      std::vector<int32_t> table;
      std::vector<uint64_t> hashes;
      REQUIRE(pool.match(b.data(), (45 - 1) / bs, table, hashes) == 2);
      CHECK(table[0] == kva->blocks[0]);
      CHECK(table[1] == kva->blocks[1]);
      CHECK(hashes == std::vector<uint64_t>{h0, h1});
      CHECK(pool.refs(table[0]) == 2);
      table.push_back(pool.alloc());
      REQUIRE(table.back() >= 0);
      SeqRows q;
      q.n_rows = 45 - 32;
      q.pos0 = 32;
      q.blocks = table.data();
      q.n_blocks = int(table.size());
      std::vector<int32_t> out(static_cast<size_t>(q.n_rows));
      for (int i = 0; i < q.n_rows; ++i) out[size_t(i)] = i;
      std::vector<float> shared(size_t(q.n_rows) * Vs);
      StepInputs in;
      in.tokens = b.data() + 32;
      in.n_tokens = q.n_rows;
      in.seqs = &q;
      in.n_seqs = 1;
      in.out_rows = out.data();
      in.n_out = q.n_rows;
      in.logits = shared.data();
      runner->step(in);

      std::vector<float> unshared(45 * Vs);
      auto kvb = runner->new_kv(45);
      runner->forward(*kvb, b.data(), 45, 0, unshared.data(), nullptr);
      for (int i = 0; i < q.n_rows; ++i) {
        CAPTURE(i);
        CHECK(row_rel_diff(shared.data() + size_t(i) * Vs, unshared.data() + size_t(32 + i) * Vs,
                           Vs) <= 1e-5);
      }
      for (int32_t blk : table) pool.release(blk);
      kva.reset();
      kvb.reset();
      CHECK(pool.used() == 0);
      CHECK(pool.cached() == 2);  // a's published blocks stay findable
    }
  }

  TEST_CASE("a chat's turns continue their parked sequence and keep no old one") {
    auto model = Qwen3Model::load(kModels + kFixtures[0]);
    RunnerSpec spec;
    spec.block_size = 16;
    auto runner = make_runner(*model, spec);
    Engine engine(*runner);
    Session session(engine);
    std::mt19937 rng(5);
    std::vector<int32_t> prompt = random_ids(rng, 20, model->config().vocab_size);
    for (int turn = 0; turn < 4; ++turn) {
      CAPTURE(turn);
      const GenerationResult r = session.generate(prompt, greedy_opts(6));
      // Every turn after the first computes only the new message and the previous reply's last
      // token (never fed), not the whole conversation: the parked sequence's partial block counts.
      if (turn > 0) CHECK(r.metrics.prefill_tokens == 1 + 5);
      CHECK(engine.held() == 1);  // only the last turn, parked
      prompt = session.cached_tokens();
      prompt.push_back(r.tokens.back());
      const auto more = random_ids(rng, 5, model->config().vocab_size);
      prompt.insert(prompt.end(), more.begin(), more.end());
    }
    session.reset();
    CHECK(runner->kv_pool().used() == 0);
  }

  TEST_CASE("KV pool: references, publish and match, LRU eviction, collisions") {
    SUBCASE("alloc, retain, release") {
      KVPool pool(4, 2);
      CHECK(pool.n_blocks() == 4);
      CHECK(pool.block_size() == 2);
      std::set<int> got;
      for (int i = 0; i < 4; ++i) {
        const int b = pool.alloc();
        REQUIRE(b >= 0);
        REQUIRE(b < 4);
        CHECK(pool.refs(b) == 1);
        got.insert(b);
      }
      CHECK(got.size() == 4);
      CHECK(pool.used() == 4);
      CHECK(pool.available() == 0);
      CHECK(pool.alloc() == -1);
      const int b0 = *got.begin();
      pool.retain(b0);
      CHECK(pool.refs(b0) == 2);
      pool.release(b0);
      CHECK(pool.refs(b0) == 1);
      CHECK(pool.used() == 4);
      pool.release(b0);
      CHECK(pool.refs(b0) == 0);
      CHECK(pool.used() == 3);
      CHECK(pool.available() == 1);
      CHECK(pool.cached() == 0);  // never published: free, not cached
      CHECK_THROWS_AS(pool.release(b0), Error);
      CHECK_THROWS_AS(pool.retain(b0), Error);  // a free block cannot come back
      CHECK(pool.alloc() == b0);
      CHECK(pool.alloc() == -1);
      for (int b : got) pool.release(b);
      CHECK(pool.used() == 0);
      CHECK(pool.available() == 4);
      CHECK_THROWS_AS(KVPool(0, 4), Error);
      CHECK_THROWS_AS(KVPool(4, 0), Error);
    }

    SUBCASE("extents: a growing sequence takes the next block, a new one a fresh extent") {
      KVPool pool(20, 4, 8);  // extents [0, 8), [8, 16) and the short [16, 20)
      CHECK_THROWS_AS(KVPool(4, 4, 0), Error);
      const int a0 = pool.alloc();
      CHECK(a0 == 0);
      CHECK(pool.alloc(a0) == 1);
      CHECK(pool.alloc(1) == 2);
      CHECK(pool.alloc() == 8);  // a second sequence starts an extent of its own
      CHECK(pool.alloc(8) == 9);
      CHECK(pool.alloc() == 16);
      CHECK(pool.alloc() == 3);   // no extent left unused: the lowest free block
      CHECK(pool.alloc(2) == 4);  // 3 is taken
      for (int b = 5; b < 8; ++b) CHECK(pool.alloc(b - 1) == b);
      CHECK(pool.alloc(7) == 10);  // 8 starts another extent, so never "after 7"
      CHECK(pool.alloc(16) == 17);
      CHECK(pool.alloc(17) == 18);
      CHECK(pool.alloc(18) == 19);
      CHECK(pool.alloc(19) == 11);  // past the last block
      // An extent whose blocks are all let go is fresh again.
      for (int b : {8, 9, 10, 11}) pool.release(b);
      CHECK(pool.alloc() == 8);
      CHECK(pool.alloc(5) == 9);  // 6 is held: the lowest free block
      CHECK(pool.used() == 14);
      CHECK(pool.available() == 6);
    }

    SUBCASE("publish and match") {
      KVPool pool(8, 4);
      const std::vector<int32_t> t = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
      const int b0 = pool.alloc(), b1 = pool.alloc(), b2 = pool.alloc();
      CHECK_FALSE(pool.published(b0));
      const uint64_t h0 = pool.publish(b0, KVPool::kRootHash, t.data());
      CHECK(h0 == KVPool::hash_block(KVPool::kRootHash, t.data(), 4));
      const uint64_t h1 = pool.publish(b1, h0, t.data() + 4);
      CHECK(h1 == KVPool::hash_block(h0, t.data() + 4, 4));
      CHECK(h1 != KVPool::hash_block(KVPool::kRootHash, t.data() + 4, 4));  // the parent counts
      CHECK(pool.published(b0));
      CHECK(pool.published(b1));
      CHECK(pool.publish(b0, KVPool::kRootHash, t.data()) == h0);  // publishing twice is a no-op

      std::vector<int32_t> blocks;
      std::vector<uint64_t> hashes;
      // b2 is not published: the run stops after two blocks.
      CHECK(pool.match(t.data(), 3, blocks, hashes) == 2);
      CHECK(blocks == std::vector<int32_t>{b0, b1});
      CHECK(hashes == std::vector<uint64_t>{h0, h1});
      CHECK(pool.refs(b0) == 2);
      CHECK(pool.refs(b1) == 2);
      CHECK(pool.hits() == 2);
      // max_blocks bounds the run.
      std::vector<int32_t> one;
      std::vector<uint64_t> one_h;
      CHECK(pool.match(t.data(), 1, one, one_h) == 1);
      CHECK(one == std::vector<int32_t>{b0});
      pool.release(b0);
      // A different second block, then a different first one.
      auto t2 = t;
      t2[5] = 99;
      std::vector<int32_t> m2;
      std::vector<uint64_t> m2h;
      CHECK(pool.match(t2.data(), 3, m2, m2h) == 1);
      pool.release(m2[0]);
      t2[0] = 99;
      m2.clear();
      m2h.clear();
      CHECK(pool.match(t2.data(), 3, m2, m2h) == 0);
      CHECK(m2.empty());

      // An equal block published again stays private (and frees, not caches, when let go).
      const int b3 = pool.alloc();
      CHECK(pool.publish(b3, KVPool::kRootHash, t.data()) == h0);
      CHECK_FALSE(pool.published(b3));
      pool.release(b3);
      CHECK(pool.cached() == 0);

      for (int b : blocks) pool.release(b);
      pool.release(b0), pool.release(b1), pool.release(b2);
      CHECK(pool.used() == 0);
      CHECK(pool.cached() == 2);  // b0 and b1
      CHECK(pool.available() == 8);
      CHECK_THROWS_AS(pool.publish(b2, KVPool::kRootHash, t.data() + 8), Error);  // nobody holds it
      // Cached blocks are found again, and leave the cache while held.
      blocks.clear();
      hashes.clear();
      CHECK(pool.match(t.data(), 3, blocks, hashes) == 2);
      CHECK(pool.cached() == 0);
      CHECK(pool.used() == 2);
      CHECK(pool.refs(b0) == 1);
      for (int b : blocks) pool.release(b);
      CHECK(pool.cached() == 2);
    }

    SUBCASE("free blocks first, then cached ones least recently used first") {
      KVPool pool(6, 1);
      std::vector<int32_t> b(4);
      for (int i = 0; i < 4; ++i) {
        b[size_t(i)] = pool.alloc();
        const int32_t tok = 100 + i;
        pool.publish(b[size_t(i)], KVPool::kRootHash, &tok);
      }
      for (int i : {2, 0, 3, 1}) pool.release(b[size_t(i)]);
      CHECK(pool.cached() == 4);
      CHECK(pool.available() == 6);
      // Finding block 0 again makes it the most recently used once let go.
      const int32_t tok0 = 100;
      std::vector<int32_t> m;
      std::vector<uint64_t> mh;
      REQUIRE(pool.match(&tok0, 1, m, mh) == 1);
      CHECK(m[0] == b[0]);
      pool.release(m[0]);
      // Two never-used blocks come first, without evicting anything.
      const int f0 = pool.alloc(), f1 = pool.alloc();
      CHECK(std::find(b.begin(), b.end(), f0) == b.end());
      CHECK(std::find(b.begin(), b.end(), f1) == b.end());
      CHECK(pool.evicted() == 0);
      CHECK(pool.cached() == 4);
      // Then the cached ones, in order 2, 3, 1, 0.
      for (int i : {2, 3, 1, 0}) {
        CAPTURE(i);
        CHECK(pool.alloc() == b[size_t(i)]);
        CHECK_FALSE(pool.published(b[size_t(i)]));
        const int32_t tok = 100 + i;
        m.clear();
        mh.clear();
        CHECK(pool.match(&tok, 1, m, mh) == 0);  // evicted: no longer findable
      }
      CHECK(pool.evicted() == 4);
      CHECK(pool.alloc() == -1);
      CHECK(pool.used() == 6);
    }

    SUBCASE("eviction never hands out a referenced block") {
      const int n = 32, bs = 2;
      KVPool pool(n, bs);
      std::mt19937 rng(3);
      std::vector<int> refs(size_t(n), 0);  // the model of the pool's references
      std::vector<int32_t> held;
      for (int i = 0; i < n; ++i) {
        const int b = pool.alloc();
        REQUIRE(b >= 0);
        refs[size_t(b)] = 1;
        held.push_back(b);
      }
      // Publish some, each as a first block with its own tokens; hold some twice.
      std::set<int> published, released;
      for (int32_t b : held) {
        if (rng() % 2) {
          const int32_t tok[2] = {b, 7};
          pool.publish(b, KVPool::kRootHash, tok);
          published.insert(b);
        }
        if (rng() % 3 == 0) {
          pool.retain(b);
          ++refs[size_t(b)];
        }
      }
      // Let go once of about half: the doubly held stay referenced.
      for (int32_t b : held)
        if (rng() % 2) {
          pool.release(b);
          if (--refs[size_t(b)] == 0) released.insert(b);
        }
      int zero = 0;
      for (int r : refs) zero += r == 0;
      CHECK(pool.used() == n - zero);
      CHECK(pool.available() == zero);
      int handed = 0;
      for (;;) {
        const int b = pool.alloc();
        if (b < 0) break;
        CAPTURE(b);
        CHECK(refs[size_t(b)] == 0);
        CHECK(released.count(b) == 1);
        refs[size_t(b)] = 1;
        ++handed;
      }
      CHECK(handed == zero);
      CHECK(pool.used() == n);
      // The published blocks still held are still findable, with their own block.
      for (int b : published)
        if (!released.count(b)) {
          const int32_t tok[2] = {b, 7};
          std::vector<int32_t> m;
          std::vector<uint64_t> mh;
          CHECK(pool.match(tok, 1, m, mh) == 1);
          if (!m.empty()) {
            CHECK(m[0] == b);
            pool.release(m[0]);
          }
        }

      // And at random: alloc, retain, release, publish, match against the model.
      std::vector<int32_t> tokens(static_cast<size_t>(bs));
      for (int it = 0; it < 20000; ++it) {
        const int op = int(rng() % 5);
        const int b = int(rng() % unsigned(n));
        if (op == 0) {
          const int a = pool.alloc();
          if (a < 0) {
            for (int r : refs) CHECK(r > 0);
          } else {
            REQUIRE(refs[size_t(a)] == 0);
            refs[size_t(a)] = 1;
          }
        } else if (op == 1 && refs[size_t(b)] > 0) {
          pool.retain(b);
          ++refs[size_t(b)];
        } else if (op == 2 && refs[size_t(b)] > 0) {
          pool.release(b);
          --refs[size_t(b)];
        } else if (op == 3 && refs[size_t(b)] > 0) {
          tokens = {int32_t(rng() % 8), int32_t(rng() % 8)};
          pool.publish(b, KVPool::kRootHash, tokens.data());
        } else if (op == 4) {
          tokens = {int32_t(rng() % 8), int32_t(rng() % 8)};
          std::vector<int32_t> m;
          std::vector<uint64_t> mh;
          if (pool.match(tokens.data(), 1, m, mh) == 1) ++refs[size_t(m[0])];
        }
        if (it % 1000 == 0) {
          int used = 0;
          for (int i = 0; i < n; ++i) {
            CHECK(pool.refs(i) == refs[size_t(i)]);
            used += refs[size_t(i)] > 0;
          }
          CHECK(pool.used() == used);
          CHECK(pool.available() == n - used);
        }
      }
      for (int i = 0; i < n; ++i)
        while (refs[size_t(i)] > 0) pool.release(i), --refs[size_t(i)];
      CHECK(pool.used() == 0);
      CHECK(pool.available() == n);
    }

    SUBCASE("a hash collision does not hand out the other block") {
      // Two blocks of 8 tokens with the same hash after the root, found offline by lattice
      // reduction on FNV-1a (its xor with a byte is an addition of a small difference, so equal
      // hashes are a short vector of a lattice; the final mix is a bijection).
      const std::vector<int32_t> t1 = {819, 38086, 5816, 22172, 54021, 1817, 13013, 22373};
      const std::vector<int32_t> t2 = {1591, 27067, 29032, 12421, 53516, 4374, 2341, 21532};
      REQUIRE(t1 != t2);
      REQUIRE(KVPool::hash_block(KVPool::kRootHash, t1.data(), 8) ==
              KVPool::hash_block(KVPool::kRootHash, t2.data(), 8));
      KVPool pool(4, 8);
      const int b1 = pool.alloc();
      const uint64_t h = pool.publish(b1, KVPool::kRootHash, t1.data());
      std::vector<int32_t> m;
      std::vector<uint64_t> mh;
      CHECK(pool.match(t2.data(), 1, m, mh) == 0);
      CHECK(m.empty());
      CHECK(pool.refs(b1) == 1);
      // The colliding block cannot take the hash over either: it stays private.
      const int b2 = pool.alloc();
      CHECK(pool.publish(b2, KVPool::kRootHash, t2.data()) == h);
      CHECK_FALSE(pool.published(b2));
      CHECK(pool.match(t2.data(), 1, m, mh) == 0);
      pool.release(b1);
      pool.release(b2);
      CHECK(pool.cached() == 1);
      CHECK(pool.match(t2.data(), 1, m, mh) == 0);
      CHECK(pool.match(t1.data(), 1, m, mh) == 1);
      CHECK(m == std::vector<int32_t>{b1});
      pool.release(b1);
      CHECK(pool.used() == 0);
    }
  }

  TEST_CASE("preemption changes no token, greedy or sampled") {
    auto model = Qwen3Model::load(kModels + kFixtures[1]);
    const int V = model->config().vocab_size;
    std::mt19937 rng(11);
    std::vector<std::vector<int32_t>> prompts;
    for (int len : {9, 17, 4, 13, 21}) prompts.push_back(random_ids(rng, len, V));
    const int max_new = 40;  // the longest request needs 61 positions: 16 blocks of 4
    for (bool sampled : {false, true}) {
      CAPTURE(sampled);
      std::vector<GenerateOptions> opts;
      for (size_t i = 0; i < prompts.size(); ++i)
        opts.push_back(sampled ? sampled_opts(max_new, 100 + i) : greedy_opts(max_new));
      RunnerSpec spec;
      auto big = make_runner(*model, spec);
      Scheduler s_big(*big);
      const auto want = run_all(s_big, prompts, opts);
      for (const auto& r : want) CHECK(r.metrics.preemptions == 0);

      for (int blocks : {16, 24}) {
        CAPTURE(blocks);
        spec.kv_blocks = blocks;
        auto small = make_runner(*model, spec);
        Scheduler s_small(*small);
        const auto got = run_all(s_small, prompts, opts);
        int preemptions = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          CAPTURE(i);
          CHECK(got[i].finish_reason == "length");
          CHECK(got[i].tokens == want[i].tokens);
          CHECK(got[i].metrics.prompt_tokens == int(prompts[i].size()));
          preemptions += got[i].metrics.preemptions;
        }
        CHECK(preemptions > 0);
        CHECK(small->kv_pool().used() == 0);
      }
    }
  }

  TEST_CASE("cancelling one request changes no other's tokens") {
    auto model = Qwen3Model::load(kModels + kFixtures[0]);
    const int V = model->config().vocab_size;
    std::mt19937 rng(21);
    std::vector<std::vector<int32_t>> prompts;
    for (int len : {12, 30, 5, 19}) prompts.push_back(random_ids(rng, len, V));
    for (bool sampled : {false, true}) {
      CAPTURE(sampled);
      std::vector<GenerateOptions> opts;
      for (size_t i = 0; i < prompts.size(); ++i)
        opts.push_back(sampled ? sampled_opts(20, 7 + i) : greedy_opts(20));
      RunnerSpec spec;
      spec.threads = 2;
      spec.block_size = 8;
      auto runner = make_runner(*model, spec);
      // Without the cancelled one (request 1).
      Scheduler ref(*runner);
      const auto want =
          run_all(ref, {prompts[0], prompts[2], prompts[3]}, {opts[0], opts[2], opts[3]});
      const auto want_all = run_all(ref, prompts, opts);

      auto fresh = make_runner(*model, spec);
      Scheduler sched(*fresh, [] {
        SchedulerOptions so;
        so.max_batch_tokens = 16;  // request 1's prompt takes two steps
        return so;
      }());
      std::vector<Scheduler::Id> ids;
      for (size_t i = 0; i < prompts.size(); ++i) ids.push_back(sched.submit(prompts[i], opts[i]));
      std::vector<Scheduler::Event> ev;
      for (int i = 0; i < 6; ++i) REQUIRE(sched.step(ev));
      sched.cancel(ids[1]);
      sched.cancel(12345);  // unknown: ignored
      while (!sched.idle()) REQUIRE(sched.step(ev));
      std::vector<GenerationResult> got;
      for (auto id : ids) got.push_back(sched.take(id));
      CHECK(got[1].finish_reason == "cancelled");
      CHECK(got[1].tokens.size() < 20);
      CHECK(std::equal(got[1].tokens.begin(), got[1].tokens.end(), want_all[1].tokens.begin()));
      CHECK(got[0].tokens == want[0].tokens);
      CHECK(got[2].tokens == want[1].tokens);
      CHECK(got[3].tokens == want[2].tokens);
      for (int i : {0, 2, 3}) CHECK(got[size_t(i)].finish_reason == "length");
      sched.cancel(ids[0]);  // already taken: ignored
      CHECK_THROWS_AS(sched.take(ids[0]), Error);
      CHECK(fresh->kv_pool().used() == 0);
    }
  }

  TEST_CASE("random submits, cancels and steps leak no KV block") {
    auto model = Qwen3Model::load(kModels + kFixtures[1]);
    const int V = model->config().vocab_size;
    RunnerSpec spec;
    spec.block_size = 4;
    spec.kv_blocks = 12;
    spec.max_seqs = 6;
    auto runner = make_runner(*model, spec);
    KVPool& pool = runner->kv_pool();
    std::mt19937 rng(2024);
    // Prompts from a few shared stems, so prefix sharing and eviction happen too.
    std::vector<std::vector<int32_t>> stems;
    for (int i = 0; i < 4; ++i) stems.push_back(random_ids(rng, 12, V));
    int finished_count = 0, preempted = 0, cancelled = 0, errors = 0, parked_taken = 0;
    {
      SchedulerOptions so;
      so.max_batch_tokens = 12;
      Scheduler sched(*runner, so);
      std::set<Scheduler::Id> live, done, parked;
      std::map<Scheduler::Id, int> max_new;
      std::vector<Scheduler::Event> ev;
      for (int it = 0; it < 4000; ++it) {
        const unsigned op = rng() % 10;
        if (op < 3) {
          const auto& stem = stems[rng() % stems.size()];
          std::vector<int32_t> p(stem.begin(), stem.begin() + 1 + rng() % stem.size());
          if (rng() % 2) p.push_back(int32_t(rng() % unsigned(V)));
          GenerateOptions o =
              rng() % 3 ? greedy_opts(int(rng() % 9)) : sampled_opts(int(rng() % 9), rng());
          if (rng() % 4 == 0) o.stop_ids = {int32_t(rng() % unsigned(V))}, o.ignore_eos = false;
          Scheduler::Id resume = 0;
          if (!parked.empty() && rng() % 2) {
            resume = *parked.begin();
            parked.erase(parked.begin());
          }
          const auto id = sched.submit(p, o, resume);
          live.insert(id);
          max_new[id] = o.max_new_tokens;
        } else if (op < 4 && !live.empty()) {
          auto itl = live.begin();
          std::advance(itl, rng() % live.size());
          sched.cancel(*itl);
        } else if (op < 5 && !parked.empty()) {
          sched.forget(*parked.begin());
          parked.erase(parked.begin());
        } else {
          ev.clear();
          sched.step(ev);
          for (const auto& e : ev)
            if (e.finished) done.insert(e.id);
        }
        CHECK(pool.used() <= pool.n_blocks());
        // Take what finished, sometimes parking it for a later resume.
        for (auto id : done) {
          REQUIRE(live.count(id) == 1);
          live.erase(id);
          const bool park = rng() % 3 == 0;
          const GenerationResult r = sched.take(id, park);
          if (park) parked.insert(id), ++parked_taken;
          ++finished_count;
          preempted += r.metrics.preemptions;
          cancelled += r.finish_reason == "cancelled";
          errors += r.finish_reason == "error";
          CHECK(int(r.tokens.size()) <= max_new[id]);
          // A preempted sequence recomputes its generated tokens too.
          if (r.metrics.preemptions == 0)
            CHECK(r.metrics.prefill_tokens <= r.metrics.prompt_tokens);
          CHECK((r.finish_reason == "length" || r.finish_reason == "stop" ||
                 r.finish_reason == "cancelled"));
          if (r.finish_reason == "length") CHECK(int(r.tokens.size()) == max_new[id]);
        }
        done.clear();
      }
      // Drain: finish everything, take it, forget what is parked (some of it still parked).
      while (!sched.idle()) {
        ev.clear();
        REQUIRE(sched.step(ev));
        for (const auto& e : ev)
          if (e.finished) {
            sched.take(e.id);
            live.erase(e.id);
            ++finished_count;
          }
      }
      CHECK(live.empty());
      if (!parked.empty()) sched.forget(*parked.begin());
      // The rest stay parked: destroying the scheduler must let them go.
    }
    MESSAGE("soak: ", finished_count, " finished, ", cancelled, " cancelled, ", preempted,
            " preemptions, ", parked_taken, " parked, ", pool.evicted(), " evictions");
    CHECK(errors == 0);
    CHECK(finished_count > 500);
    CHECK(cancelled > 0);
    CHECK(preempted > 0);
    CHECK(pool.evicted() > 0);
    CHECK(pool.used() == 0);
    CHECK(pool.available() == pool.n_blocks());
  }

  TEST_CASE("sessions of one model share its threads, and generate alone or together alike") {
    hearth_model_params mp = hearth_model_params_default();
    mp.n_threads = 2;
    hearth_model* model = nullptr;
    REQUIRE(hearth_model_load((kModels + kFixtures[0]).c_str(), &mp, &model) == HEARTH_OK);
    hearth_model_info info{};
    info.struct_size = sizeof info;
    REQUIRE(hearth_model_get_info(model, &info) == HEARTH_OK);
    const int V = info.vocab_size;
    std::mt19937 rng(5);
    std::vector<std::vector<int32_t>> prompts;
    for (int len : {7, 15, 3, 26}) prompts.push_back(random_ids(rng, len, V));
    const int kSessions = 4;

    struct Collect {
      std::vector<int32_t> tokens;
      static int on_text(const char*, size_t, int32_t token, void* user) {
        if (token != HEARTH_TOKEN_NONE) static_cast<Collect*>(user)->tokens.push_back(token);
        return 1;
      }
    };
    auto generate = [&](hearth_session* s, const std::vector<int32_t>& prompt,
                        std::vector<int32_t>& out, hearth_status& st) {
      Collect c;
      hearth_generate_params gp = hearth_generate_params_default();
      gp.max_new_tokens = 16;
      gp.ignore_eos = 1;
      gp.on_text = &Collect::on_text;
      gp.user_data = &c;
      char* text = nullptr;
      st = hearth_session_generate_tokens(s, prompt.data(), prompt.size(), &gp, &text);
      hearth_free(text);
      out = c.tokens;
    };

    // Alone, one session after another.
    std::vector<std::vector<int32_t>> alone(kSessions);
    {
      hearth_session* s = nullptr;
      REQUIRE(hearth_session_new(model, nullptr, &s) == HEARTH_OK);
      for (int i = 0; i < kSessions; ++i) {
        hearth_status st;
        REQUIRE(hearth_session_reset(s) == HEARTH_OK);
        generate(s, prompts[size_t(i)], alone[size_t(i)], st);
        REQUIRE(st == HEARTH_OK);
        CHECK(alone[size_t(i)].size() == 16);
      }
      hearth_session_free(s);
    }
    const int before = count_threads();

    std::vector<hearth_session*> sessions(kSessions, nullptr);
    for (auto& s : sessions) REQUIRE(hearth_session_new(model, nullptr, &s) == HEARTH_OK);
    CHECK(count_threads() == before);
    std::vector<std::vector<int32_t>> together(kSessions);
    std::vector<hearth_status> status(kSessions, HEARTH_ERR_INTERNAL);
    std::atomic<int> peak{0};
    {
      std::atomic<int> ready{0};
      std::vector<std::thread> threads;
      for (int i = 0; i < kSessions; ++i)
        threads.emplace_back([&, i] {
          ++ready;
          while (ready.load() < kSessions) std::this_thread::yield();
          generate(sessions[size_t(i)], prompts[size_t(i)], together[size_t(i)], status[size_t(i)]);
          peak = std::max(peak.load(), count_threads());
        });
      for (auto& t : threads) t.join();
    }
    // The 4 callers themselves are the only threads added while they generate.
    CHECK(peak.load() <= before + kSessions);
    CHECK(count_threads() == before);
    for (int i = 0; i < kSessions; ++i) {
      CAPTURE(i);
      CHECK(status[size_t(i)] == HEARTH_OK);
      CHECK(together[size_t(i)] == alone[size_t(i)]);
    }
    for (auto* s : sessions) hearth_session_free(s);
    hearth_model_free(model);
  }

  TEST_CASE("CPU KV storage: blocks in extents, where paging finds them, block copies") {
    // Every byte of every (block, layer, head) unit written through k, v and the scales survives
    // the others' writes; KVPaging, which the kernels address by, lands on k and v of the block a
    // position is in; a block copy moves exactly that block.
    for (DType dt : {DType::F32, DType::I8}) {
      CAPTURE(std::string(dtype_name(dt)));
      BackendOptions o;
      o.kv_dtype = dt;
      cpu::CpuBackend be(o);
      const KVSpec spec{3, 2, 128};
      const int n_blocks = 21, bs = 32;  // extents of 2 (F32) and 8 (I8) blocks, the last short
      auto base = be.alloc_kv(spec, n_blocks, bs);
      auto& kv = static_cast<cpu::CpuKVStorage&>(*base);
      REQUIRE(kv.extent_blocks > 1);
      REQUIRE(kv.extent_blocks < n_blocks);
      const size_t rows = size_t(bs) * spec.head_dim * dtype_size(dt);
      const size_t scales = dt == DType::I8 ? size_t(bs) * 4 : 0;
      auto parts = [&](int b, int l, int h) {
        return std::vector<std::pair<uint8_t*, size_t>>{
            {kv.k(b, l, h), rows},
            {kv.v(b, l, h), rows},
            {reinterpret_cast<uint8_t*>(dt == DType::I8 ? kv.k_scale(b, l, h) : nullptr), scales},
            {reinterpret_cast<uint8_t*>(dt == DType::I8 ? kv.v_scale(b, l, h) : nullptr), scales}};
      };
      auto tag = [](int b, int l, int h, int part, size_t i) {
        return uint8_t((b * 131 + l * 37 + h * 17 + part * 7 + int(i)) % 251);
      };
      auto each = [&](auto f) {
        for (int b = 0; b < n_blocks; ++b)
          for (int l = 0; l < spec.n_layers; ++l)
            for (int h = 0; h < spec.n_kv_heads; ++h) {
              const auto ps = parts(b, l, h);
              for (int part = 0; part < 4; ++part)
                for (size_t i = 0; i < ps[size_t(part)].second; ++i)
                  f(b, l, h, part, ps[size_t(part)].first + i, i);
            }
      };
      each(
          [&](int b, int l, int h, int part, uint8_t* p, size_t i) { *p = tag(b, l, h, part, i); });
      int wrong = 0;
      each([&](int b, int l, int h, int part, uint8_t* p, size_t i) {
        wrong += *p != tag(b, l, h, part, i);
      });
      CHECK(wrong == 0);
      // A sequence over blocks in any order, through the kernels' address arithmetic.
      const std::vector<int32_t> table = {20, 3, 4, 5, 9, 0, 16, 15};
      SeqRows sq;
      sq.blocks = table.data();
      const cpu::KVPaging pg = kv.paging(sq);
      const int64_t row = spec.head_dim * int64_t(dtype_size(dt));
      int misplaced = 0;
      for (int l = 0; l < spec.n_layers; ++l)
        for (int h = 0; h < spec.n_kv_heads; ++h)
          for (int p = 0; p < int(table.size()) * bs; ++p) {
            const int b = table[size_t(p / bs)];
            misplaced += pg.row(kv.k(0, l, h), p, row) != kv.k(b, l, h) + (p % bs) * row;
            misplaced += pg.row(kv.v(0, l, h), p, row) != kv.v(b, l, h) + (p % bs) * row;
            if (dt == DType::I8) {
              misplaced += pg.row(kv.k_scale(0, l, h), p, 4) !=
                           static_cast<const void*>(kv.k_scale(b, l, h) + p % bs);
              misplaced += pg.row(kv.v_scale(0, l, h), p, 4) !=
                           static_cast<const void*>(kv.v_scale(b, l, h) + p % bs);
            }
          }
      CHECK(misplaced == 0);
      be.copy_kv_block(kv, 3, 18);
      wrong = 0;
      each([&](int b, int l, int h, int part, uint8_t* p, size_t i) {
        wrong += *p != tag(b == 18 ? 3 : b, l, h, part, i);
      });
      CHECK(wrong == 0);
      CHECK_THROWS_AS(be.copy_kv_block(kv, 3, n_blocks), Error);
    }
  }

  TEST_CASE("the default context is what the backend's KV room holds") {
    auto m = Qwen3Model::load(kModels + kFixtures[0]);
    const auto& c = m->config();
    // From the config, not from KVStorage: f32 keys and values of every layer, and of one layer.
    const size_t layer = size_t(c.num_key_value_heads) * size_t(c.head_dim) * 4;
    const size_t all = size_t(c.num_hidden_layers) * 2 * layer;
    const int max = c.max_position_embeddings;
    BackendOptions o;
    o.kv_dtype = DType::F32;
    auto fits = [&](KVRoom room) {
      return fitting_positions(RoomBackend(o, room), m->graph(), max);
    };
    CHECK(fits({}) == max);
    CHECK(fits({all * size_t(max), SIZE_MAX}) == max);
    CHECK(fits({all * 1000 + all / 2, SIZE_MAX}) == 768);  // 1000 positions: down to 256s
    CHECK(fits({0, layer * 100}) == 96);                   // under 256: down to 16s
    CHECK(fits({all * 5000, layer * 3000}) == 2816);       // the tighter of the two
    CHECK_THROWS_WITH_AS(fits({all * 15, SIZE_MAX}), doctest::Contains("room for the KV cache"),
                         Error);
    // What fits is what a runner can allocate.
    Runner r(std::make_unique<RoomBackend>(o, KVRoom{all * 1000, SIZE_MAX}), m->graph(),
             c.vocab_size, fits({all * 1000, SIZE_MAX}), RunnerOptions{});
    CHECK(r.kv_pool().n_blocks() * r.kv_pool().block_size() >= 768);
  }
}
