#include <doctest/doctest.h>
#include <simdjson.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "models/qwen3_model.h"
#include "models/standin.h"

namespace fs = std::filesystem;
using hearth::StandinSpec;

namespace {

const std::string kTokenizerDir = std::string(HEARTH_SHARED_DIR) + "/qwen3-tokenizer";

struct TempDir {
  fs::path path;
  TempDir() {
    static std::atomic<int> counter{0};
    path = fs::temp_directory_path() /
           ("hearth_standin_" + std::to_string(getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  REQUIRE_MESSAGE(f.good(), "cannot read ", p.string());
  return std::string(std::istreambuf_iterator<char>(f), {});
}

struct TensorInfo {
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

// A safetensors file read independently of the writer: 8-byte little-endian header length, JSON
// header, data.
struct StFile {
  uint64_t header_len = 0;
  std::map<std::string, TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
  std::string bytes;  // whole file
  std::string data(const std::string& name) const {
    auto& t = tensors.at(name);
    return bytes.substr(8 + header_len + t.begin, t.end - t.begin);
  }
};

StFile read_st(const fs::path& p) {
  StFile f;
  f.bytes = slurp(p);
  REQUIRE(f.bytes.size() >= 8);
  for (int i = 0; i < 8; ++i) f.header_len |= uint64_t(uint8_t(f.bytes[size_t(i)])) << (8 * i);
  REQUIRE(8 + f.header_len <= f.bytes.size());
  simdjson::dom::parser parser;
  simdjson::dom::object root;
  REQUIRE(parser.parse(f.bytes.data() + 8, f.header_len).get(root) == simdjson::SUCCESS);
  for (auto [key, value] : root) {
    std::string k(key);
    if (k == "__metadata__") {
      for (auto [mk, mv] : value.get_object())
        f.metadata[std::string(mk)] = std::string(mv.get_string().value());
      continue;
    }
    TensorInfo t;
    t.dtype = std::string(value["dtype"].get_string().value());
    for (auto d : value["shape"].get_array()) t.shape.push_back(d.get_int64().value());
    auto off = value["data_offsets"].get_array();
    t.begin = off.at(0).get_uint64().value();
    t.end = off.at(1).get_uint64().value();
    f.tensors[k] = t;
  }
  return f;
}

int64_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

// The Hugging Face Qwen3 state dict for a spec, written out from the model definition.
std::map<std::string, std::vector<int64_t>> expected_tensors(const StandinSpec& s) {
  std::map<std::string, std::vector<int64_t>> m;
  m["model.embed_tokens.weight"] = {s.vocab, s.hidden};
  for (int i = 0; i < s.layers; ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    m[p + "self_attn.q_proj.weight"] = {s.heads * s.head_dim, s.hidden};
    m[p + "self_attn.k_proj.weight"] = {s.kv_heads * s.head_dim, s.hidden};
    m[p + "self_attn.v_proj.weight"] = {s.kv_heads * s.head_dim, s.hidden};
    m[p + "self_attn.o_proj.weight"] = {s.hidden, s.heads * s.head_dim};
    m[p + "self_attn.q_norm.weight"] = {s.head_dim};
    m[p + "self_attn.k_norm.weight"] = {s.head_dim};
    m[p + "mlp.gate_proj.weight"] = {s.intermediate, s.hidden};
    m[p + "mlp.up_proj.weight"] = {s.intermediate, s.hidden};
    m[p + "mlp.down_proj.weight"] = {s.hidden, s.intermediate};
    m[p + "input_layernorm.weight"] = {s.hidden};
    m[p + "post_attention_layernorm.weight"] = {s.hidden};
  }
  m["model.norm.weight"] = {s.hidden};
  if (!s.tied) m["lm_head.weight"] = {s.vocab, s.hidden};
  return m;
}

std::vector<float> decode(const StFile& f, const std::string& name) {
  const auto& t = f.tensors.at(name);
  std::string raw = f.data(name);
  size_t n = size_t(numel(t.shape));
  std::vector<float> v(n);
  if (t.dtype == "F32") {
    REQUIRE(raw.size() == n * 4);
    std::memcpy(v.data(), raw.data(), n * 4);
  } else {
    REQUIRE(raw.size() == n * 2);
    for (size_t i = 0; i < n; ++i) {
      uint16_t h = uint16_t(uint8_t(raw[2 * i]) | uint8_t(raw[2 * i + 1]) << 8);
      v[i] = t.dtype == "BF16" ? hearth::bf16_to_f32(h) : hearth::f16_to_f32(h);
    }
  }
  return v;
}

double mean_of(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += x;
  return s / double(v.size());
}

double std_of(const std::vector<float>& v) {
  double m = mean_of(v), s = 0;
  for (float x : v) s += (x - m) * (x - m);
  return std::sqrt(s / double(v.size()));
}

double kurtosis(const std::vector<float>& v) {
  double m = mean_of(v), s2 = 0, s4 = 0;
  for (float x : v) {
    double d = (x - m) * (x - m);
    s2 += d;
    s4 += d * d;
  }
  s2 /= double(v.size());
  s4 /= double(v.size());
  return s4 / (s2 * s2);
}

// Root mean square of each column (or each element for a vector).
std::vector<double> column_rms(const std::vector<float>& v, int64_t cols) {
  std::vector<double> r(size_t(cols), 0.0);
  int64_t rows = int64_t(v.size()) / cols;
  for (int64_t i = 0; i < int64_t(v.size()); ++i)
    r[size_t(i % cols)] += double(v[size_t(i)]) * v[size_t(i)];
  for (auto& x : r) x = std::sqrt(x / double(rows));
  return r;
}

std::set<int> outliers(const std::vector<double>& scale, double factor) {
  std::vector<double> sorted = scale;
  std::sort(sorted.begin(), sorted.end());
  double median = sorted[sorted.size() / 2];
  std::set<int> out;
  for (size_t i = 0; i < scale.size(); ++i)
    if (scale[i] > factor * median) out.insert(int(i));
  return out;
}

simdjson::dom::element parse_json(simdjson::dom::parser& parser, const fs::path& p,
                                  simdjson::padded_string& keep) {
  keep = simdjson::padded_string(slurp(p));
  simdjson::dom::element e;
  REQUIRE_MESSAGE(parser.parse(keep).get(e) == simdjson::SUCCESS, "bad JSON in ", p.string());
  return e;
}

StandinSpec small_custom() {
  StandinSpec s;
  s.hidden = 48;
  s.intermediate = 96;
  s.layers = 2;
  s.heads = 4;
  s.kv_heads = 2;
  s.head_dim = 16;
  s.vocab = 4096;
  return s;
}

}  // namespace

TEST_SUITE("standin") {
  TEST_CASE("tiny preset: files, tensor names, shapes, sizes and configs") {
    TempDir dir;
    StandinSpec spec = hearth::standin_preset("tiny");
    spec.seed = 7;
    hearth::write_standin(dir.str(), spec, kTokenizerDir);

    for (const char* f : {"config.json", "generation_config.json", "model.safetensors",
                          "tokenizer.json", "tokenizer_config.json"})
      CHECK_MESSAGE(fs::is_regular_file(dir.path / f), f);
    CHECK_FALSE(fs::exists(dir.path / "model.safetensors.index.json"));
    CHECK(slurp(dir.path / "tokenizer.json") == slurp(fs::path(kTokenizerDir) / "tokenizer.json"));
    CHECK(slurp(dir.path / "tokenizer_config.json") ==
          slurp(fs::path(kTokenizerDir) / "tokenizer_config.json"));

    StFile st = read_st(dir.path / "model.safetensors");
    CHECK(st.header_len % 8 == 0);
    CHECK(st.metadata["format"] == "pt");
    auto want = expected_tensors(spec);
    REQUIRE(st.tensors.size() == want.size());
    CHECK(want.count("lm_head.weight") == 0);
    uint64_t data_bytes = 0;
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (auto& kv : want) {
      const std::string& name = kv.first;
      const std::vector<int64_t>& shape = kv.second;
      CAPTURE(name);
      REQUIRE(st.tensors.count(name));
      const auto& t = st.tensors[name];
      CHECK(t.dtype == "BF16");
      CHECK(t.shape == shape);
      CHECK(t.end - t.begin == uint64_t(numel(shape)) * 2);
      data_bytes += uint64_t(numel(shape)) * 2;
      ranges.push_back({t.begin, t.end});
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); ++i) CHECK(ranges[i].first == ranges[i - 1].second);
    CHECK(ranges.front().first == 0);
    CHECK(st.bytes.size() == 8 + st.header_len + data_bytes);
    CHECK(want.at("model.embed_tokens.weight") == std::vector<int64_t>{151936, 64});
    CHECK(want.at("model.layers.1.self_attn.q_proj.weight") == std::vector<int64_t>{128, 64});

    simdjson::dom::parser parser;
    simdjson::padded_string keep;
    auto cfg = parse_json(parser, dir.path / "config.json", keep);
    CHECK(cfg["architectures"].at(0).get_string().value() == "Qwen3ForCausalLM");
    CHECK(cfg["model_type"].get_string().value() == "qwen3");
    CHECK(cfg["hidden_size"].get_int64().value() == 64);
    CHECK(cfg["intermediate_size"].get_int64().value() == 160);
    CHECK(cfg["num_hidden_layers"].get_int64().value() == 2);
    CHECK(cfg["num_attention_heads"].get_int64().value() == 4);
    CHECK(cfg["num_key_value_heads"].get_int64().value() == 2);
    CHECK(cfg["head_dim"].get_int64().value() == 32);
    CHECK(cfg["vocab_size"].get_int64().value() == 151936);
    CHECK(cfg["max_position_embeddings"].get_int64().value() == 40960);
    CHECK(cfg["max_window_layers"].get_int64().value() == 2);
    CHECK(cfg["rope_theta"].get_double().value() == 1000000.0);
    CHECK(cfg["rms_norm_eps"].get_double().value() == 1e-6);
    CHECK(cfg["tie_word_embeddings"].get_bool().value() == true);
    CHECK(cfg["attention_bias"].get_bool().value() == false);
    CHECK(cfg["use_sliding_window"].get_bool().value() == false);
    CHECK(cfg["sliding_window"].is_null());
    CHECK(cfg["rope_scaling"].is_null());
    CHECK(cfg["hidden_act"].get_string().value() == "silu");
    CHECK(cfg["torch_dtype"].get_string().value() == "bfloat16");
    CHECK(cfg["bos_token_id"].get_int64().value() == 151643);
    CHECK(cfg["eos_token_id"].get_int64().value() == 151645);
    CHECK(cfg["hearth_standin"]["seed"].get_uint64().value() == 7);
    CHECK(cfg["hearth_standin"]["heavy_tailed"].get_bool().value() == false);

    simdjson::dom::parser parser2;
    simdjson::padded_string keep2;
    auto gen = parse_json(parser2, dir.path / "generation_config.json", keep2);
    CHECK(gen["bos_token_id"].get_int64().value() == 151643);
    CHECK(gen["pad_token_id"].get_int64().value() == 151643);
    CHECK(gen["do_sample"].get_bool().value() == true);
    CHECK(gen["eos_token_id"].at(0).get_int64().value() == 151645);
    CHECK(gen["eos_token_id"].at(1).get_int64().value() == 151643);
    CHECK(gen["temperature"].get_double().value() == 0.6);
    CHECK(gen["top_k"].get_int64().value() == 20);
    CHECK(gen["top_p"].get_double().value() == 0.95);

    // Scales the forward pass depends on: embeddings 0.02, q/k/v/gate/up 1/sqrt(hidden),
    // down_proj 1/sqrt(intermediate)/sqrt(2 * layers), norms near 1.
    CHECK(std_of(decode(st, "model.embed_tokens.weight")) == doctest::Approx(0.02).epsilon(0.02));
    CHECK(std_of(decode(st, "model.layers.0.self_attn.q_proj.weight")) ==
          doctest::Approx(0.125).epsilon(0.05));
    CHECK(std_of(decode(st, "model.layers.1.mlp.down_proj.weight")) ==
          doctest::Approx(1 / std::sqrt(160.0) / 2).epsilon(0.05));
    auto norm = decode(st, "model.layers.0.input_layernorm.weight");
    CHECK(mean_of(norm) == doctest::Approx(1.0).epsilon(0.03));
    CHECK(std_of(norm) < 0.1);
    CHECK(kurtosis(decode(st, "model.embed_tokens.weight")) == doctest::Approx(3.0).epsilon(0.05));
  }

  TEST_CASE("same spec gives identical bytes at any thread count; another seed differs") {
    TempDir a, b, c;
    StandinSpec spec = hearth::standin_preset("tiny");
    hearth::write_standin(a.str(), spec, kTokenizerDir, 1);
    hearth::write_standin(b.str(), spec, kTokenizerDir, 3);
    for (const char* f : {"config.json", "generation_config.json", "model.safetensors"})
      CHECK_MESSAGE(slurp(a.path / f) == slurp(b.path / f), f);
    spec.seed = 2;
    hearth::write_standin(c.str(), spec, kTokenizerDir);
    StFile sa = read_st(a.path / "model.safetensors"), sc = read_st(c.path / "model.safetensors");
    for (auto& kv : sa.tensors) CHECK_MESSAGE(sa.data(kv.first) != sc.data(kv.first), kv.first);
    CHECK(slurp(a.path / "config.json") != slurp(c.path / "config.json"));
  }

  TEST_CASE("shards=3 writes three files and an index covering every tensor") {
    TempDir one, three;
    StandinSpec spec = hearth::standin_preset("tiny");
    hearth::write_standin(one.str(), spec, kTokenizerDir);
    spec.shards = 3;
    hearth::write_standin(three.str(), spec, kTokenizerDir);
    CHECK_FALSE(fs::exists(three.path / "model.safetensors"));

    simdjson::dom::parser parser;
    simdjson::padded_string keep;
    auto idx = parse_json(parser, three.path / "model.safetensors.index.json", keep);
    std::map<std::string, std::string> weight_map;
    for (auto [k, v] : idx["weight_map"].get_object())
      weight_map[std::string(k)] = std::string(v.get_string().value());

    StFile whole = read_st(one.path / "model.safetensors");
    std::map<std::string, std::string> found;  // tensor -> shard holding it
    uint64_t total = 0;
    for (int k = 1; k <= 3; ++k) {
      std::string name = "model-0000" + std::to_string(k) + "-of-00003.safetensors";
      CAPTURE(name);
      REQUIRE(fs::is_regular_file(three.path / name));
      StFile sh = read_st(three.path / name);
      CHECK(!sh.tensors.empty());
      uint64_t bytes = 0;
      for (auto& [t, info] : sh.tensors) {
        CHECK(found.count(t) == 0);
        found[t] = name;
        bytes += info.end - info.begin;
        // Tensor data depends on the seed and the name only, not on the file layout.
        CHECK(sh.data(t) == whole.data(t));
      }
      CHECK(sh.bytes.size() == 8 + sh.header_len + bytes);
      total += bytes;
    }
    CHECK(found == weight_map);
    CHECK(found.size() == whole.tensors.size());
    CHECK(idx["metadata"]["total_size"].get_uint64().value() == total);
    CHECK(fs::file_size(three.path / "config.json") == fs::file_size(one.path / "config.json"));

    // Rewriting the sharded dir as a single file removes the stale shards and index.
    spec.shards = 1;
    hearth::write_standin(three.str(), spec, kTokenizerDir);
    CHECK(fs::is_regular_file(three.path / "model.safetensors"));
    CHECK_FALSE(fs::exists(three.path / "model.safetensors.index.json"));
    CHECK_FALSE(fs::exists(three.path / "model-00001-of-00003.safetensors"));
  }

  TEST_CASE("untied F32 custom spec has lm_head and 4-byte elements") {
    TempDir dir;
    StandinSpec spec = small_custom();
    spec.tied = false;
    spec.dtype = "F32";
    spec.rope_theta = 10000;
    spec.rms_eps = 1e-5;
    hearth::write_standin(dir.str(), spec, "");
    CHECK_FALSE(fs::exists(dir.path / "tokenizer.json"));
    StFile st = read_st(dir.path / "model.safetensors");
    auto want = expected_tensors(spec);
    REQUIRE(st.tensors.size() == want.size());
    REQUIRE(st.tensors.count("lm_head.weight"));
    CHECK(st.tensors["lm_head.weight"].shape == std::vector<int64_t>{4096, 48});
    uint64_t data_bytes = 0;
    for (auto& [name, shape] : want) {
      CHECK(st.tensors[name].dtype == "F32");
      data_bytes += uint64_t(numel(shape)) * 4;
    }
    CHECK(st.bytes.size() == 8 + st.header_len + data_bytes);
    CHECK(st.data("lm_head.weight") != st.data("model.embed_tokens.weight"));

    simdjson::dom::parser parser;
    simdjson::padded_string keep;
    auto cfg = parse_json(parser, dir.path / "config.json", keep);
    CHECK(cfg["tie_word_embeddings"].get_bool().value() == false);
    CHECK(cfg["torch_dtype"].get_string().value() == "float32");
    CHECK(cfg["rope_theta"].get_double().value() == 10000.0);
    CHECK(cfg["rms_norm_eps"].get_double().value() == 1e-5);
    CHECK(cfg["hearth_standin"]["preset"].get_string().value() == "");
    // Python writes floats with a decimal point; a loader that types fields by JSON token must
    // see rope_theta as a float, as in the real Qwen3 config.
    std::string text = slurp(dir.path / "config.json");
    CHECK(text.find("\"rope_theta\": 10000.0,") != std::string::npos);
    CHECK(text.find("\"rms_norm_eps\": 1e-05,") != std::string::npos);
  }

  TEST_CASE("heavy tails and outlier channels") {
    TempDir dir;
    StandinSpec spec = small_custom();
    spec.heavy_tailed = true;
    spec.outlier_channels = 3;
    spec.dtype = "F16";
    hearth::write_standin(dir.str(), spec, "");
    StFile st = read_st(dir.path / "model.safetensors");
    CHECK(st.tensors["model.norm.weight"].dtype == "F16");

    // Student-t with 4 degrees of freedom has a far heavier tail than a normal (kurtosis 3).
    auto up = decode(st, "model.layers.0.mlp.up_proj.weight");
    CHECK(kurtosis(up) > 5.0);

    auto norm_ch = outliers(column_rms(decode(st, "model.layers.0.input_layernorm.weight"), 48), 5);
    auto q_cols = outliers(column_rms(decode(st, "model.layers.0.self_attn.q_proj.weight"), 48), 5);
    auto up_cols = outliers(column_rms(up, 48), 5);
    auto emb_cols = outliers(column_rms(decode(st, "model.embed_tokens.weight"), 48), 5);
    auto down_cols = outliers(column_rms(decode(st, "model.layers.1.mlp.down_proj.weight"), 96), 5);
    auto o_cols = outliers(column_rms(decode(st, "model.layers.1.self_attn.o_proj.weight"), 64), 5);
    CHECK(norm_ch.size() == 3);
    CHECK(q_cols.size() == 3);
    CHECK(emb_cols.size() == 3);
    CHECK(down_cols.size() == 3);
    CHECK(o_cols.size() == 3);
    // Same channels in every layer and every hidden-input projection, as in a real model.
    CHECK(up_cols == q_cols);
    CHECK(outliers(column_rms(decode(st, "model.layers.1.post_attention_layernorm.weight"), 48),
                   5) == norm_ch);
    // Norm, projection-input and embedding outliers never share a channel.
    std::set<int> all(norm_ch);
    all.insert(q_cols.begin(), q_cols.end());
    all.insert(emb_cols.begin(), emb_cols.end());
    CHECK(all.size() == 9);
    // q_norm / k_norm are over head_dim, not hidden: no outliers there.
    CHECK(
        outliers(column_rms(decode(st, "model.layers.0.self_attn.q_norm.weight"), 16), 5).empty());
  }

  TEST_CASE("presets match the Qwen3 releases; bad names and specs are rejected") {
    struct Row {
      const char* name;
      int hidden, inter, layers, heads, kv, hd;
      bool tied;
    };
    for (Row r :
         {Row{"0.6b", 1024, 3072, 28, 16, 8, 128, true},
          Row{"1.7b", 2048, 6144, 28, 16, 8, 128, true},
          Row{"4b", 2560, 9728, 36, 32, 8, 128, true},
          Row{"8b", 4096, 12288, 36, 32, 8, 128, false}, Row{"tiny", 64, 160, 2, 4, 2, 32, true}}) {
      CAPTURE(r.name);
      StandinSpec s = hearth::standin_preset(r.name);
      CHECK(s.preset == r.name);
      CHECK(s.hidden == r.hidden);
      CHECK(s.intermediate == r.inter);
      CHECK(s.layers == r.layers);
      CHECK(s.heads == r.heads);
      CHECK(s.kv_heads == r.kv);
      CHECK(s.head_dim == r.hd);
      CHECK(s.tied == r.tied);
      CHECK(s.vocab == 151936);
      CHECK(s.max_position == 40960);
    }
    // Qwen3-0.6B's published parameter count, from the tensor shapes.
    int64_t params = 0;
    for (auto& [n, shape] : expected_tensors(hearth::standin_preset("0.6b")))
      params += numel(shape);
    CHECK(params == 596049920);

    try {
      hearth::standin_preset("7b");
      FAIL("no error for an unknown preset");
    } catch (const hearth::Error& e) {
      std::string msg = e.what();
      CHECK(msg.find("7b") != std::string::npos);
      CHECK(msg.find("0.6b") != std::string::npos);
      CHECK(msg.find("tiny") != std::string::npos);
    }

    TempDir dir;
    StandinSpec empty;  // custom without shapes
    CHECK_THROWS_AS(hearth::write_standin(dir.str(), empty, ""), hearth::Error);
    StandinSpec bad = small_custom();
    bad.dtype = "Q4";
    CHECK_THROWS_AS(hearth::write_standin(dir.str(), bad, ""), hearth::Error);
    bad = small_custom();
    bad.heads = 3;  // not a multiple of kv_heads
    CHECK_THROWS_AS(hearth::write_standin(dir.str(), bad, ""), hearth::Error);
    bad = small_custom();
    bad.shards = 1000;
    CHECK_THROWS_AS(hearth::write_standin(dir.str(), bad, ""), hearth::Error);
    bad = small_custom();
    bad.outlier_channels = 17;  // three disjoint sets of 17 do not fit in 48 channels
    CHECK_THROWS_AS(hearth::write_standin(dir.str(), bad, ""), hearth::Error);
    CHECK_THROWS_AS(hearth::write_standin(dir.str(), small_custom(), "/nonexistent/tokenizer"),
                    hearth::Error);
  }

  TEST_CASE("MoE presets: 30b-a3b at Qwen3-30B-A3B's shape, moe-tiny loads and generates") {
    const StandinSpec big = hearth::standin_preset("30b-a3b");
    CHECK(big.hidden == 2048);
    CHECK(big.layers == 48);
    CHECK(big.heads == 32);
    CHECK(big.kv_heads == 4);
    CHECK(big.experts == 128);
    CHECK(big.experts_per_tok == 8);
    CHECK(big.moe_intermediate == 768);
    CHECK(!big.tied);
    // 30.5 B parameters, as published: embeddings and head, attention, routers and experts.
    const int64_t h = big.hidden, q = int64_t(big.heads) * 128, kv = int64_t(big.kv_heads) * 128;
    const int64_t layer = h * q * 2 + h * kv * 2 + 2 * 128 + 2 * h + int64_t(big.experts) * h +
                          int64_t(big.experts) * 3 * h * big.moe_intermediate;
    const int64_t total = 2 * int64_t(big.vocab) * h + h + layer * big.layers;
    CHECK(total > 30'400'000'000);
    CHECK(total < 30'600'000'000);

    TempDir dir;
    hearth::write_standin(dir.str(), hearth::standin_preset("moe-tiny"), kTokenizerDir);
    auto m = hearth::Qwen3Model::load(dir.str());
    CHECK(m->config().is_moe());
    CHECK(m->config().random_weights);
    CHECK(m->weights().layers[0].sparse());
    CHECK(m->weights().layers[0].expert_gate.size() == 8);
    int moe_nodes = 0;
    for (const hearth::Node& n : m->graph().nodes()) moe_nodes += n.op == hearth::Op::MoE;
    CHECK(moe_nodes == 2);
  }
}
