// The CLI as outside checks use it: exact command forms, JSON output, raw logits files, and the
// failure contract (non-zero exit, one `error:` line naming the problem, never a signal).
#include <doctest/doctest.h>
#include <simdjson.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cli_run.h"

using namespace cli_test;

namespace {

std::string ids_arg(simdjson::dom::element arr) {
  std::string s;
  for (int64_t v : arr.get_array()) s += (s.empty() ? "" : ",") + std::to_string(v);
  return s;
}

}  // namespace

TEST_SUITE("cli") {
  TEST_CASE("generate --json gives the fixture's greedy tokens") {
    const std::string dir = kModels + "tiny-untied-sharded-f32";
    simdjson::dom::parser p;
    simdjson::dom::element seq = p.load(dir + "/expected.json")["sequences"].at(2);
    std::vector<int64_t> want;
    for (int64_t v : seq["greedy"]["tokens"].get_array()) want.push_back(v);
    Result r = run("generate --model " + dir + " --ids " + ids_arg(seq["input_ids"]) +
                   " --max-new-tokens 24 --ignore-eos --json");
    REQUIRE(r.status == 0);
    simdjson::dom::parser p2;
    simdjson::dom::element out = p2.parse(r.out);
    std::vector<int64_t> got;
    for (int64_t v : out["tokens"].get_array()) got.push_back(v);
    CHECK(got == want);
    CHECK(std::string_view(out["finish_reason"]) == "length");
    CHECK(int64_t(out["metrics"]["new_tokens"]) == 24);
    CHECK(std::string_view(out["manifest"]["config_hash"]).size() == 16);
  }

  TEST_CASE("an int8 KV cache and huge-page weights keep the fixture's greedy tokens") {
    const std::string dir = kModels + "tiny-tied-bf16";
    simdjson::dom::parser p;
    simdjson::dom::element seq = p.load(dir + "/expected.json")["sequences"].at(0);
    std::vector<int64_t> want;
    for (int64_t v : seq["greedy"]["tokens"].get_array()) want.push_back(v);
    Result r = run("generate --model " + dir + " --ids " + ids_arg(seq["input_ids"]) +
                   " --max-new-tokens 8 --ignore-eos --kv int8 --hugepages --json");
    REQUIRE(r.status == 0);
    simdjson::dom::parser p2;
    simdjson::dom::element out = p2.parse(r.out);
    std::vector<int64_t> got;
    for (int64_t v : out["tokens"].get_array()) got.push_back(v);
    want.resize(got.size());
    CHECK(got == want);
  }

  TEST_CASE("bench: the checkpoint's sampling, a list of depths, a plot") {
    const std::string dir = kModels + "tiny-tied-bf16";  // generation_config: 0.6, top-k 20, 0.95
    const std::string svg = (std::filesystem::temp_directory_path() /
                             ("hearth_bench_plot_" + std::to_string(getpid()) + ".svg"))
                                .string();
    const std::string base =
        "bench --model " + dir + " --threads 1 --prompt 4 --gen 4 --reps 1 --json";
    Result r = run(base + " --depth 0,8 --plot " + svg);
    REQUIRE(r.status == 0);
    simdjson::dom::parser p;
    simdjson::dom::element out = p.parse(r.out);
    CHECK(std::string_view(out["decode_sampling"]) == "temperature 0.6, top-k 20, top-p 0.95");
    CHECK(std::string_view(out["kv_dtype"]) == "F16");  // llama.cpp's default cache type too
    simdjson::dom::array depths = out["depths"].get_array();
    REQUIRE(depths.size() == 2);
    CHECK(int64_t(depths.at(1)["depth"]) == 8);
    // Deeper, the decode reads 8 more positions of every layer's keys and values per token.
    CHECK(double(depths.at(1)["decode_kv_bytes_per_token"]) >
          double(depths.at(0)["decode_kv_bytes_per_token"]));
    std::ifstream f(svg);
    std::stringstream text;
    text << f.rdbuf();
    CHECK(text.str().rfind("<svg", 0) == 0);
    CHECK(text.str().find("depth 8</text>") != std::string::npos);
    std::filesystem::remove(svg);

    Result g = run(base + " --greedy --mmap");
    REQUIRE(g.status == 0);
    simdjson::dom::parser p2;
    simdjson::dom::element gout = p2.parse(g.out);
    CHECK(std::string_view(gout["decode_sampling"]) == "greedy");
    CHECK(double(gout["head_screen_saving_bytes"]) == 0);  // no copies, no screen
    CHECK(int64_t(gout["kv_block"]) == 32);                // the engine's default

    // The KV block size as every model command takes it, in the single and the batched bench.
    for (const std::string mode : {"", " --parallel 1,2"}) {
      Result b = run(base + mode + " --kv-block 8");
      REQUIRE(b.status == 0);
      simdjson::dom::parser p3;
      CHECK(int64_t(p3.parse(b.out)["kv_block"]) == 8);
    }
    // The decode at depth shares the prefill's context blocks: the bench's pool holds the context
    // once (twice would not fit: 16 blocks of 8 for it against 24 in the pool).
    Result d = run(base + " --depth 120 --kv-block 8");
    CHECK(d.status == 0);
    CHECK(d.err.find("KV cache budget") == std::string::npos);
    expect_error(base + " --kv-block 0", "--kv-block must be in [1, 4096]");
    expect_error(base + " --depth 8,0", "--depth: list the depths in ascending order");
    expect_error(base + " --mmap --hugepages", "--mmap and --hugepages contradict each other");
  }

  TEST_CASE("bench --parallel: each N's FLOPs, peak and ceiling") {
    const std::string dir = kModels + "tiny-tied-bf16";
    Result r = run("bench --model " + dir +
                   " --threads 1 --prompt 4 --gen 4 --reps 1 --parallel 1,2 --json");
    REQUIRE(r.status == 0);
    // A decode token's model FLOPs from the checkpoint's config, independently of the bench: 2
    // per weight of the layers and the LM head, 4 x heads x head_dim per visible position; the
    // 4 decode tokens after a 4-token prompt see 5..8 positions, 6.5 on average.
    simdjson::dom::parser pc;
    simdjson::dom::element c = pc.load(dir + "/config.json");
    const double H = double(int64_t(c["hidden_size"])), I = double(int64_t(c["intermediate_size"]));
    const double L = double(int64_t(c["num_hidden_layers"])), hd = double(int64_t(c["head_dim"]));
    const double nh = double(int64_t(c["num_attention_heads"]));
    const double nkv = double(int64_t(c["num_key_value_heads"]));
    const double V = double(int64_t(c["vocab_size"]));
    const double layer_weights = 2 * H * nh * hd + 2 * H * nkv * hd + 3 * H * I;
    const double token_flops = 2 * H * V + L * (2 * layer_weights + 4 * nh * hd * 6.5);
    simdjson::dom::parser p;
    simdjson::dom::element out = p.parse(r.out);
    simdjson::dom::array rows = out["parallel"].get_array();
    REQUIRE(rows.size() == 2);
    for (simdjson::dom::element row : rows) {
      const double n = double(int64_t(row["n"]));
      const double flops = row["decode_flops_per_step"], ms = row["decode_ms_per_step"];
      CHECK(flops == doctest::Approx(n * token_flops).epsilon(1e-9));
      CHECK(double(row["decode_gflops"]) == doctest::Approx(flops / ms * 1e-6).epsilon(1e-9));
      // BF16 weights and f32 attention: f32 FMAs, the peak they are quoted against.
      CHECK(std::string_view(row["decode_peak_arithmetic"]) == "f32 FMA");
      const double peak = row["decode_peak_gops"], bw = row["mem_bw_gbs"];
      REQUIRE(peak > 0);
      REQUIRE(bw > 0);
      CHECK(double(row["decode_peak_fraction"]) ==
            doctest::Approx(double(row["decode_gflops"]) / peak).epsilon(1e-9));
      const double step_s =
          std::max(double(row["decode_bytes_per_step"]) / (bw * 1e9), flops / (peak * 1e9));
      const double ceiling = row["decode_ceiling_tokens_per_s"];
      CHECK(ceiling == doctest::Approx(n / step_s).epsilon(1e-9));
      CHECK(double(row["decode_ceiling_fraction"]) ==
            doctest::Approx(double(row["decode_tokens_per_s"]) / ceiling).epsilon(1e-9));
    }
  }

  TEST_CASE("logits with --chunks writes [T, vocab] float32 matching the fixture") {
    const std::string dir = kModels + "tiny-tied-bf16";
    simdjson::dom::parser p;
    simdjson::dom::element seq = p.load(dir + "/expected.json")["sequences"].at(2);
    fs::path d = temp_dir();
    Result r = run("logits --model " + dir + " --ids " + ids_arg(seq["input_ids"]) + " --out " +
                   (d / "l.f32").string() + " --chunks 20,13 --threads 2");
    REQUIRE(r.status == 0);
    std::string got = slurp((d / "l.f32").string());
    std::string want = slurp(dir + "/seq3.logits.f32");
    REQUIRE(got.size() == want.size());
    const float* g = reinterpret_cast<const float*>(got.data());
    const float* w = reinterpret_cast<const float*>(want.data());
    size_t bad = 0;
    for (size_t i = 0; i < want.size() / 4; ++i)
      if (!(std::fabs(g[i] - w[i]) <= 1e-4 + 1e-4 * std::fabs(w[i]))) ++bad;
    CHECK(bad == 0);
    fs::remove_all(d);
  }

  TEST_CASE("failures are one error line and a non-zero exit") {
    const std::string m = kModels + "tiny-tied-bf16";
    expect_error("generate --model /nonexistent/model --ids 1,2", "/nonexistent/model");
    expect_error("generate --model " + m + " --ids 1,x,3", "'x' is not an integer");
    // 2^32 + 1 would wrap to id 1 if narrowed.
    expect_error("generate --model " + m + " --ids 1,4294967297", "4294967297 is out of range");
    expect_error("generate --model " + m + " --ids 1 --max-new-tokens 99999999999", "out of range");
    expect_error("generate --model " + m + " --ids 1,999999", "token id 999999");
    expect_error("generate --model " + m + " --ids 1 --max-new-tokens 50000",
                 "max_position_embeddings");
    expect_error("generate --model " + m + " --ids 1 --bogus", "--bogus");
    expect_error("generate --model " + m + " --ids 1 --top-p 1.5", "--top-p");
    expect_error("logits --model " + m + " --ids 1,2,3 --out /tmp/x --chunks 1,1", "add up");
    expect_error("logits --model " + m + " --ids 1 --out /nonexistent/dir/x", "/nonexistent/dir/x");
    expect_error("generate --model " + m + " --ids 1 --isa sse9", "sse9");
    expect_error("generate --model " + m + " --ids 1 --kv int4", "expected f32, f16, bf16 or int8");
    expect_error("frobnicate", "frobnicate");
    // JSON ids are range-checked as 64-bit values: 2^32 + 1 is not read as 1.
    const std::string big = (fs::temp_directory_path() / "hearth_big_id.jsonl").string();
    std::ofstream(big) << "{\"ids\": [9707, 4294967297]}\n";
    expect_error("detokenize --model " + m + " --jsonl " + big, "4294967297, not a token id");
    fs::remove(big);
    expect_error("tokenize --model " + m + " --jsonl /tmp", "a folder, not a JSON-lines file");
    expect_error("tokenize --model " + m + " --jsonl /dev/zero", "longer than 64 MiB");
  }
}
