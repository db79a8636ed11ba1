// The CPU backend's threads claim a linear step's rows in chunks (backends/cpu/row_claims.h):
// every row once, whatever the order the threads arrive in, and logits bit for bit those of one
// thread (which takes every row in one chunk) where the chunks really are many.
#include <doctest/doctest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <thread>
#include <vector>

#include "backends/cpu/row_claims.h"
#include "core/backend.h"
#include "core/runner.h"
#include "models/qwen3_model.h"
#include "models/standin.h"
#include "quant/quantizer.h"
#include "tests/fixture_models.h"

namespace fs = std::filesystem;
using namespace hearth;

namespace {

// Chunks a thread took: [b, e) pairs.
using Chunks = std::vector<std::pair<int64_t, int64_t>>;

std::vector<Chunks> claim_all(int64_t n, int64_t k, int64_t align, int nth) {
  std::atomic<int64_t> next{0};
  std::vector<Chunks> got(static_cast<size_t>(nth));
  std::vector<std::thread> threads;
  for (int t = 0; t < nth; ++t)
    threads.emplace_back([&, t] {
      cpu::RowClaims rows(next, n, align, cpu::RowClaims::min_rows(k, align), nth);
      for (int64_t b, e; rows.next(&b, &e);) got[size_t(t)].push_back({b, e});
    });
  for (auto& th : threads) th.join();
  return got;
}

}  // namespace

TEST_SUITE("engine") {
  TEST_CASE("row claims: every row once, in aligned chunks no smaller than the minimum") {
    for (int nth : {1, 2, 3, 8}) {
      for (int64_t n : {int64_t(16), int64_t(1000), int64_t(4096), int64_t(151936)}) {
        const int64_t k = 1024, align = 16;
        const int64_t min_rows = cpu::kClaimMinWeights / k;  // 128, a multiple of 16
        CAPTURE(nth);
        CAPTURE(n);
        std::vector<int> seen(size_t(n), 0);
        size_t chunks = 0;
        for (const Chunks& c : claim_all(n, k, align, nth))
          for (auto [b, e] : c) {
            ++chunks;
            REQUIRE(b < e);
            CHECK(b % align == 0);
            if (e < n) CHECK(e % align == 0);
            if (e < n) CHECK(e - b >= min_rows);
            for (int64_t r = b; r < e; ++r) ++seen[size_t(r)];
          }
        for (int64_t r = 0; r < n; ++r) REQUIRE(seen[size_t(r)] == 1);
        if (nth == 1) CHECK(chunks == 1);
      }
    }
  }

  TEST_CASE("rows claimed in chunks: logits bit for bit those of one thread, every ISA and type") {
    // Matrices of several chunks each (gate/up: 2048 rows of 256 weights, 512-row chunks at
    // least), so threads interleave their chunks and reuse their quantized inputs across them.
    const fs::path dir = fs::temp_directory_path() / ("hearth_claims_" + std::to_string(getpid()));
    fs::remove_all(dir);
    StandinSpec spec;
    spec.preset = "";
    spec.hidden = 256;
    spec.intermediate = 2048;
    spec.layers = 2;
    spec.heads = 8;
    spec.kv_heads = 4;
    spec.head_dim = 64;
    spec.vocab = 512;
    spec.max_position = 256;
    write_standin((dir / "bf16").string(), spec, "", 1);
    for (int bits : {8, 4}) {
      quant::QuantizeOptions o;
      o.main = {bits, 32, DType::F16};
      o.head = {8, 32, DType::F16};
      quant::quantize_checkpoint((dir / "bf16").string(),
                                 (dir / ("q" + std::to_string(bits))).string(), o);
    }
    const std::vector<int32_t> ids = {5, 77, 400, 3, 3, 190, 511, 42, 8, 260, 1, 99};
    for (const std::string name : {"bf16", "q8", "q4"}) {
      auto m = Qwen3Model::load((dir / name).string());
      const int V = m->config().vocab_size;
      for (const std::string& isa : test::isas_here()) {
        // A 7-token prefill (the decode kernels over several rows), then one token a step.
        auto logits = [&](int threads) {
          BackendOptions bo;
          bo.cpu.isa = isa;
          bo.threads = threads;
          Runner r(create_backend("cpu", bo), m->graph(), V, 256);
          auto kv = r.new_kv(int(ids.size()));
          std::vector<float> out(static_cast<size_t>(V)), all;
          r.forward(*kv, ids.data(), 7, 0, nullptr, out.data());
          all = out;
          for (int i = 7; i < int(ids.size()); ++i) {
            r.forward(*kv, ids.data() + i, 1, i, nullptr, out.data());
            all.insert(all.end(), out.begin(), out.end());
          }
          return all;
        };
        CAPTURE(name);
        CAPTURE(isa);
        const std::vector<float> one = logits(1);
        for (int threads : {2, 3}) {
          CAPTURE(threads);
          CHECK(logits(threads) == one);
        }
      }
    }
    fs::remove_all(dir);
  }
}
