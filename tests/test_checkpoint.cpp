// Checkpoint loading: the two golden fixtures, then a battery of corrupted checkpoints written
// here, each of which must be refused with a message naming what is wrong.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/json_writer.h"
#include "core/weight_store.h"
#include "models/checkpoint.h"
#include "models/mapped_file.h"
#include "models/qwen3_config.h"
#include "models/qwen3_weights.h"
#include "models/safetensors.h"
#include "models/safetensors_writer.h"

namespace fs = std::filesystem;
using namespace hearth;

namespace {

const std::string kModels = std::string(HEARTH_SHARED_DIR) + "/fixtures/models";
const std::string kTied = kModels + "/tiny-tied-bf16";
const std::string kSharded = kModels + "/tiny-untied-sharded-f32";
const std::string kShard1 = "model-00001-of-00002.safetensors";
const std::string kShard2 = "model-00002-of-00002.safetensors";

struct TempDir {
  fs::path path;
  TempDir() {
    std::random_device rd;
    for (int attempt = 0;; ++attempt) {
      path = fs::temp_directory_path() /
             ("hearth_ckpt_" + std::to_string(::getpid()) + "_" + std::to_string(rd()));
      if (fs::create_directory(path)) break;
      if (attempt > 100) throw std::runtime_error("cannot create a temp dir");
    }
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
  std::string str() const { return path.string(); }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no hearth::Error thrown>";
}

// Checks that EXPR throws hearth::Error and that its message holds every listed substring.
#define CHECK_ERROR(expr, ...)                                                         \
  do {                                                                                 \
    const std::string msg_ = error_of([&] { (void)(expr); });                          \
    for (const std::string& needle_ : std::initializer_list<std::string>{__VA_ARGS__}) \
      CHECK_MESSAGE(msg_.find(needle_) != std::string::npos, "expected '", needle_,    \
                    "' in: ", msg_);                                                   \
  } while (0)

bool contains(const std::string& s, const std::string& sub) {
  return s.find(sub) != std::string::npos;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  REQUIRE(f.good());
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// A safetensors file with a hand-written header, for headers write_safetensors would never make.
void write_raw(const std::string& path, const std::string& header, size_t data_bytes,
               uint64_t declared_len = UINT64_MAX) {
  uint64_t n = declared_len == UINT64_MAX ? header.size() : declared_len;
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char(uint8_t(n >> (8 * i)));
  out += header;
  out.append(data_bytes, '\x11');
  write_text(path, out);
}

// ---- a tiny Qwen3 written from scratch ----

struct Tiny {
  int64_t hidden = 8, inter = 12, layers = 2, heads = 2, kv = 1, hd = 6, vocab = 16;
  bool tied = true;
};

std::vector<std::pair<std::string, std::vector<int64_t>>> tiny_shapes(const Tiny& t) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> v;
  v.push_back({"model.embed_tokens.weight", {t.vocab, t.hidden}});
  for (int64_t i = 0; i < t.layers; ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    v.push_back({p + "self_attn.q_proj.weight", {t.heads * t.hd, t.hidden}});
    v.push_back({p + "self_attn.k_proj.weight", {t.kv * t.hd, t.hidden}});
    v.push_back({p + "self_attn.v_proj.weight", {t.kv * t.hd, t.hidden}});
    v.push_back({p + "self_attn.o_proj.weight", {t.hidden, t.heads * t.hd}});
    v.push_back({p + "self_attn.q_norm.weight", {t.hd}});
    v.push_back({p + "self_attn.k_norm.weight", {t.hd}});
    v.push_back({p + "mlp.gate_proj.weight", {t.inter, t.hidden}});
    v.push_back({p + "mlp.up_proj.weight", {t.inter, t.hidden}});
    v.push_back({p + "mlp.down_proj.weight", {t.hidden, t.inter}});
    v.push_back({p + "input_layernorm.weight", {t.hidden}});
    v.push_back({p + "post_attention_layernorm.weight", {t.hidden}});
  }
  v.push_back({"model.norm.weight", {t.hidden}});
  if (!t.tied) v.push_back({"lm_head.weight", {t.vocab, t.hidden}});
  return v;
}

// Values depend on the tensor name's length and the element index, so different tensors differ
// but every run writes the same bytes; bf16-exact, so F32 and BF16 copies hold equal values.
float tiny_value(const std::string& name, size_t i) {
  return float(int((name.size() * 7 + i * 13) % 29) - 14) / 8.0f;
}

TensorToWrite tensor_of(const std::string& name, std::vector<int64_t> shape,
                        const std::string& dtype = "F32", float bias = 0.0f) {
  TensorToWrite t;
  t.name = name;
  t.dtype = dtype;
  t.shape = shape;
  size_t n = 1;
  for (int64_t d : shape) n *= size_t(d);
  t.nbytes = n * safetensors_dtype_size(dtype);
  std::string key = name == "lm_head.weight" ? "model.embed_tokens.weight" : name;
  t.fill = [n, dtype, key, bias](uint8_t* dst) {
    for (size_t i = 0; i < n; ++i) {
      float v = tiny_value(key, i) + (i == 0 ? bias : 0.0f);
      if (dtype == "F32") {
        std::memcpy(dst + 4 * i, &v, 4);
      } else if (dtype == "BF16") {
        uint16_t h = f32_to_bf16(v);
        std::memcpy(dst + 2 * i, &h, 2);
      } else if (dtype == "F16") {
        uint16_t h = f32_to_f16(v);
        std::memcpy(dst + 2 * i, &h, 2);
      } else {
        dst[i * safetensors_dtype_size(dtype)] = uint8_t(i);
      }
    }
  };
  return t;
}

std::vector<TensorToWrite> tiny_tensors(const Tiny& t, const std::string& dtype = "F32") {
  std::vector<TensorToWrite> v;
  for (auto& [name, shape] : tiny_shapes(t)) v.push_back(tensor_of(name, shape, dtype));
  return v;
}

using Fields = std::vector<std::pair<std::string, std::string>>;  // key -> raw JSON value

Fields tiny_config_fields(const Tiny& t) {
  return {{"architectures", "[\"Qwen3ForCausalLM\"]"},
          {"attention_bias", "false"},
          {"bos_token_id", "151643"},
          {"eos_token_id", "151645"},
          {"head_dim", std::to_string(t.hd)},
          {"hidden_act", "\"silu\""},
          {"hidden_size", std::to_string(t.hidden)},
          {"intermediate_size", std::to_string(t.inter)},
          {"max_position_embeddings", "4096"},
          {"model_type", "\"qwen3\""},
          {"num_attention_heads", std::to_string(t.heads)},
          {"num_hidden_layers", std::to_string(t.layers)},
          {"num_key_value_heads", std::to_string(t.kv)},
          {"rms_norm_eps", "1e-06"},
          {"rope_scaling", "null"},
          {"rope_theta", "1000000.0"},
          {"tie_word_embeddings", t.tied ? "true" : "false"},
          {"torch_dtype", "\"float32\""},
          {"use_sliding_window", "false"},
          {"vocab_size", std::to_string(t.vocab)}};
}

// Overrides replace a field's raw JSON value; an empty value removes the field.
std::string config_json(const Tiny& t, const Fields& overrides = {}) {
  Fields f = tiny_config_fields(t);
  for (auto& [k, v] : overrides) {
    bool found = false;
    for (auto& kv : f)
      if (kv.first == k) kv.second = v, found = true;
    if (!found) f.push_back({k, v});
  }
  std::string s = "{\n";
  bool first = true;
  for (auto& [k, v] : f) {
    if (v.empty()) continue;
    s += (first ? "  \"" : ",\n  \"") + k + "\": " + v;
    first = false;
  }
  return s + "\n}\n";
}

void write_tiny(const TempDir& dir, const Tiny& t, const std::vector<TensorToWrite>& tensors,
                const Fields& overrides = {}) {
  write_text(dir / "config.json", config_json(t, overrides));
  write_safetensors(dir / "model.safetensors", tensors);
}

std::vector<TensorToWrite> without(std::vector<TensorToWrite> v, const std::string& name) {
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i].name == name) v.erase(v.begin() + long(i));
  return v;
}

Qwen3Weights load_and_bind(const std::string& dir) {
  Checkpoint ck = Checkpoint::open(dir);
  return bind_qwen3_weights(ck, load_qwen3_config(dir));
}

// ---- sharded index helpers ----

std::string index_json(const std::vector<std::pair<std::string, std::string>>& weight_map) {
  std::string s = "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {";
  for (size_t i = 0; i < weight_map.size(); ++i)
    s +=
        (i ? ", " : "") + json_quote(weight_map[i].first) + ": " + json_quote(weight_map[i].second);
  return s + "}}";
}

// The sharded fixture's weight_map, rebuilt from its shards so tests can edit it.
std::vector<std::pair<std::string, std::string>> fixture_weight_map() {
  std::vector<std::pair<std::string, std::string>> wm;
  for (const std::string& f : {kShard1, kShard2}) {
    auto shard = SafetensorsFile::open(kSharded + "/" + f);  // must outlive the loop
    for (const TensorRef& t : shard->tensors()) wm.push_back({t.name, f});
  }
  return wm;
}

// A copy of the sharded fixture whose shards are symlinks, so nothing large is copied.
void link_sharded_fixture(const TempDir& dir, bool link_shard2 = true) {
  fs::copy_file(kSharded + "/config.json", dir / "config.json");
  fs::create_symlink(kSharded + "/" + kShard1, dir / kShard1);
  if (link_shard2) fs::create_symlink(kSharded + "/" + kShard2, dir / kShard2);
}

uint64_t header_len(const std::string& path) {
  std::string b = read_bytes(path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(b[size_t(i)])) << (8 * i);
  return n;
}

// Resident pages of [p, p + n) in the page cache, by mincore; p need not be page-aligned.
size_t resident_pages(const uint8_t* p, size_t n) {
  const size_t page = size_t(::sysconf(_SC_PAGESIZE));
  const uintptr_t a = uintptr_t(p) & ~uintptr_t(page - 1);
  const size_t len = size_t(uintptr_t(p) + n - a);
  std::vector<unsigned char> v((len + page - 1) / page);
  REQUIRE(::mincore(reinterpret_cast<void*>(a), len, v.data()) == 0);
  size_t r = 0;
  for (unsigned char c : v) r += c & 1;
  return r;
}

// Writes back and drops PATH from the page cache; false where that cannot be observed (tmpfs).
bool evict_from_page_cache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  const size_t n = size_t(::lseek(fd, 0, SEEK_END));
  void* m = ::mmap(nullptr, n, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  REQUIRE(m != MAP_FAILED);
  const bool evicted = resident_pages(static_cast<const uint8_t*>(m), n) == 0;
  ::munmap(m, n);
  return evicted;
}

}  // namespace

TEST_SUITE("checkpoint") {
  TEST_CASE("fixture tiny-tied-bf16: config, generation config, weights in place") {
    Qwen3Config c = load_qwen3_config(kTied);
    CHECK(c.hidden_size == 64);
    CHECK(c.intermediate_size == 160);
    CHECK(c.num_hidden_layers == 2);
    CHECK(c.num_attention_heads == 4);
    CHECK(c.num_key_value_heads == 2);
    CHECK(c.head_dim == 32);
    CHECK(c.vocab_size == 151936);
    CHECK(c.max_position_embeddings == 40960);
    CHECK(c.rope_theta == 1000000.0);
    CHECK(c.rms_norm_eps == 1e-6);
    CHECK(c.tie_word_embeddings);
    CHECK(c.torch_dtype == "bfloat16");
    CHECK(c.eos_token_ids == std::vector<int32_t>{151645});
    CHECK(c.bos_token_id == 151643);
    CHECK(!c.has_quantization_config);
    CHECK(c.config_hash.size() == 16);
    CHECK(c.config_hash == fnv1a64_hex(read_bytes(kTied + "/config.json").data(),
                                       read_bytes(kTied + "/config.json").size()));

    GenerationConfig g = load_generation_config(kTied, c);
    CHECK(g.eos_token_ids == std::vector<int32_t>{151645, 151643});
    CHECK(g.bos_token_id == 151643);
    CHECK(g.temperature == doctest::Approx(0.6));
    CHECK(g.top_k == 20);
    CHECK(g.top_p == doctest::Approx(0.95));
    CHECK(g.do_sample == true);
    CHECK(!g.min_p.has_value());
    CHECK(!g.repetition_penalty.has_value());

    Checkpoint ck = Checkpoint::open(kTied);
    REQUIRE(ck.files().size() == 1);
    CHECK(contains(ck.files()[0], "model.safetensors"));
    CHECK(ck.all().size() == 24);
    CHECK(ck.shards()[0]->metadata().at("format") == "pt");
    const std::string path = kTied + "/model.safetensors";
    const uint64_t data_start = 8 + header_len(path);
    CHECK(ck.total_bytes() == fs::file_size(path) - data_start);
    CHECK(ck.find("lm_head.weight") == nullptr);
    ck.advise_hugepages();

    Qwen3Weights w = bind_qwen3_weights(ck, c);
    CHECK(w.embed.dtype == DType::BF16);
    CHECK(w.embed.shape_vec() == std::vector<int64_t>{151936, 64});
    CHECK(w.lm_head.data == w.embed.data);
    CHECK(w.final_norm.shape_vec() == std::vector<int64_t>{64});
    REQUIRE(w.layers.size() == 2);
    for (const Qwen3LayerWeights& l : w.layers) {
      CHECK(l.q_proj.shape_vec() == std::vector<int64_t>{128, 64});
      CHECK(l.k_proj.shape_vec() == std::vector<int64_t>{64, 64});
      CHECK(l.v_proj.shape_vec() == std::vector<int64_t>{64, 64});
      CHECK(l.o_proj.shape_vec() == std::vector<int64_t>{64, 128});
      CHECK(l.q_norm.shape_vec() == std::vector<int64_t>{32});
      CHECK(l.k_norm.shape_vec() == std::vector<int64_t>{32});
      CHECK(l.gate_proj.shape_vec() == std::vector<int64_t>{160, 64});
      CHECK(l.up_proj.shape_vec() == std::vector<int64_t>{160, 64});
      CHECK(l.down_proj.shape_vec() == std::vector<int64_t>{64, 160});
      CHECK(l.input_norm.nbytes == 128);
      CHECK(l.post_attn_norm.dtype == DType::BF16);
    }

    // The views point into the map (nothing copied) and hold the file's bytes at their offsets.
    const uint8_t* base = ck.shards()[0]->file().data();
    CHECK(static_cast<const uint8_t*>(w.embed.data) >= base + data_start);
    const TensorRef* norm = ck.find("model.norm.weight");
    REQUIRE(norm != nullptr);
    CHECK(norm->data == w.final_norm.data);
    const std::string bytes = read_bytes(path);
    size_t off = size_t(norm->data - base);
    CHECK(std::memcmp(bytes.data() + off, w.final_norm.data, w.final_norm.nbytes) == 0);
  }

  TEST_CASE("fixture tiny-untied-sharded-f32: shards, untied head") {
    Qwen3Config c = load_qwen3_config(kSharded);
    CHECK(c.hidden_size == 32);
    CHECK(c.intermediate_size == 96);
    CHECK(c.num_hidden_layers == 3);
    CHECK(c.num_attention_heads == 8);
    CHECK(c.num_key_value_heads == 2);
    CHECK(c.head_dim == 16);
    CHECK(!c.tie_word_embeddings);
    CHECK(c.torch_dtype == "float32");

    Checkpoint ck = Checkpoint::open(kSharded);
    REQUIRE(ck.files().size() == 2);
    CHECK(contains(ck.files()[0], kShard1));
    CHECK(contains(ck.files()[1], kShard2));
    CHECK(ck.all().size() == 36);
    CHECK(ck.total_bytes() == 39130368);  // the index's metadata.total_size

    Checkpoint moved = std::move(ck);  // views must survive a move
    Qwen3Weights w = bind_qwen3_weights(moved, c);
    CHECK(w.embed.dtype == DType::F32);
    CHECK(w.lm_head.dtype == DType::F32);
    CHECK(w.lm_head.shape_vec() == std::vector<int64_t>{151936, 32});
    CHECK(w.lm_head.data != w.embed.data);
    CHECK(w.lm_head.data == moved.find("lm_head.weight")->data);
    CHECK(contains(moved.find("lm_head.weight")->file, kShard2));
    REQUIRE(w.layers.size() == 3);
    CHECK(w.layers[2].q_proj.shape_vec() == std::vector<int64_t>{128, 32});
    CHECK(w.layers[2].k_proj.shape_vec() == std::vector<int64_t>{32, 32});
    CHECK(w.layers[2].o_proj.shape_vec() == std::vector<int64_t>{32, 128});
    CHECK(w.layers[2].down_proj.shape_vec() == std::vector<int64_t>{32, 96});
    CHECK(w.files.size() == 2);
  }

  TEST_CASE("weights outlive the checkpoint through Qwen3Weights::files") {
    Qwen3Weights w;
    {
      Checkpoint ck = Checkpoint::open(kTied);
      w = bind_qwen3_weights(ck, load_qwen3_config(kTied));
    }
    float v = bf16_to_f32(*static_cast<const uint16_t*>(w.final_norm.data));  // ASan checks this
    CHECK(v == v);
  }

  TEST_CASE("a huge-page copy holds the same tensors, data on a cache line, and outlives it") {
    for (const std::string& dir : {kTied, kSharded}) {
      CAPTURE(dir);
      Checkpoint shared = Checkpoint::open(dir);
      Qwen3Weights w;
      {
        Checkpoint copy = Checkpoint::open(dir, MapMode::HugePageCopy);
        REQUIRE(copy.all().size() == shared.all().size());
        // The fixtures' data sections start 8-byte aligned (as Hugging Face writes them): the copy
        // is shifted, within its first 2 MiB page, so that they start on a 64-byte line.
        for (const auto& sh : copy.shards()) {
          const uint8_t* p = sh->file().data();
          uint64_t hlen = 0;
          for (int i = 0; i < 8; ++i) hlen |= uint64_t(p[i]) << (8 * i);
          CHECK(reinterpret_cast<uintptr_t>(p) % (uintptr_t(2) << 20) < 64);
          CHECK((reinterpret_cast<uintptr_t>(p) + 8 + hlen) % 64 == 0);
        }
        for (size_t i = 0; i < copy.all().size(); ++i) {
          const TensorRef& a = *shared.all()[i];
          const TensorRef& b = *copy.all()[i];
          CHECK(a.name == b.name);
          REQUIRE(a.nbytes == b.nbytes);
          CHECK(a.data != b.data);
          CHECK(std::memcmp(a.data, b.data, a.nbytes) == 0);
        }
        w = bind_qwen3_weights(copy, load_qwen3_config(dir));
      }
      const TensorRef* norm = shared.find("model.norm.weight");
      REQUIRE(norm != nullptr);
      CHECK(std::memcmp(norm->data, w.final_norm.data, norm->nbytes) == 0);
    }
    CHECK_ERROR(Checkpoint::open(kModels + "/no-such-model", MapMode::HugePageCopy),
                "no-such-model", "does not exist");
  }

  TEST_CASE("opening and binding reads headers only, no weight pages") {
    TempDir d;
    Tiny t;
    t.vocab = 131072;
    t.hidden = 64;  // a 32 MiB embedding, far larger than any readahead around the header
    write_tiny(d, t, tiny_tensors(t));
    const std::string path = d / "model.safetensors";
    if (!evict_from_page_cache(path)) {
      MESSAGE("skipped: this filesystem keeps the file in memory regardless");
      return;
    }
    Checkpoint ck = Checkpoint::open(d.str());
    Qwen3Weights w = bind_qwen3_weights(ck, load_qwen3_config(d.str()));
    // Skip the first 8 MiB of the embedding: faulting in the header may read ahead into it.
    const size_t skip = size_t(8) << 20;
    REQUIRE(w.embed.nbytes > 2 * skip);
    const uint8_t* tail = static_cast<const uint8_t*>(w.embed.data) + skip;
    const size_t tail_bytes = w.embed.nbytes - skip;
    CHECK(resident_pages(tail, tail_bytes) == 0);
    // The check can fail: reading the weights does make them resident.
    volatile uint8_t sum = 0;
    for (size_t i = 0; i < tail_bytes; i += 4096) sum = uint8_t(sum + tail[i]);
    CHECK(resident_pages(tail, tail_bytes) > 0);
  }

  TEST_CASE("safetensors: valid corner cases") {
    TempDir d;
    write_safetensors(d / "ok.safetensors",
                      {tensor_of("idx", {2}, "I32"), tensor_of("empty", {0, 7}, "F32"),
                       tensor_of("half", {2, 2}, "F16"), tensor_of("scalar", {}, "BF16"),
                       tensor_of("codes", {3, 4}, "U8"), tensor_of("signed", {5}, "I8")},
                      {{"format", "pt"}, {"hearth.quant", "q4"}});
    auto f = SafetensorsFile::open(d / "ok.safetensors");
    REQUIRE(f->tensors().size() == 6);
    // The writer will not put a tensor off its element size (no reader would take it).
    CHECK_ERROR(write_safetensors(d / "bad.safetensors",
                                  {tensor_of("c", {3}, "U8"), tensor_of("f", {1}, "F32")}),
                "bad.safetensors", "tensor 'f'", "byte 3", "4-byte element size");
    // The writer pads the header with spaces so that the data section starts on a 64-byte line.
    uint64_t hlen = 0;
    for (int i = 0; i < 8; ++i) hlen |= uint64_t(f->file().data()[i]) << (8 * i);
    CHECK((8 + hlen) % 64 == 0);
    CHECK(f->file().data()[8 + hlen - 1] == ' ');
    CHECK(f->metadata().at("hearth.quant") == "q4");
    std::map<std::string, const TensorRef*> by;
    for (const TensorRef& t : f->tensors()) by[t.name] = &t;
    CHECK(!by["codes"]->plain_dtype);
    CHECK(by["codes"]->dtype_str == "U8");
    CHECK(by["codes"]->nbytes == 12);
    CHECK(by["signed"]->dtype_str == "I8");
    CHECK_ERROR(by["codes"]->view(), "codes", "U8");
    CHECK(by["idx"]->plain_dtype);
    CHECK(by["idx"]->view().dtype == DType::I32);
    CHECK(by["empty"]->nbytes == 0);
    CHECK(by["half"]->view().shape_vec() == std::vector<int64_t>{2, 2});
    CHECK(by["scalar"]->nbytes == 2);
    // Tensors come back in file order.
    for (size_t i = 1; i < f->tensors().size(); ++i)
      CHECK(f->tensors()[i - 1].data <= f->tensors()[i].data);

    write_raw(d / "empty.safetensors", "{}      ", 0);
    CHECK(SafetensorsFile::open(d / "empty.safetensors")->tensors().empty());

    write_raw(d / "5d.safetensors",
              R"({"t":{"dtype":"F32","shape":[1,1,1,1,2],"data_offsets":[0,8]}})", 8);
    auto f5 = SafetensorsFile::open(d / "5d.safetensors");
    CHECK_ERROR(f5->tensors()[0].view(), "'t'", "dimensions");

    // A header not padded to 8 bytes (files written before safetensors padded it) puts the data
    // section at an odd offset; a shared map would hand out misaligned tensors, so it is copied.
    {
      const std::string hdr = R"({"f":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("h":{"dtype":"BF16","shape":[1],"data_offsets":[8,10]}})";
      std::string out(8, '\0');
      for (int i = 0; i < 8; ++i) out[size_t(i)] = char(uint8_t(hdr.size() >> (8 * i)));
      out += hdr;
      const float vals[2] = {1.5f, -2.25f};
      out.append(reinterpret_cast<const char*>(vals), 8);
      out += std::string("\x80\x3f", 2);  // bf16 1.0
      REQUIRE((8 + hdr.size()) % 2 == 1);
      write_text(d / "unpadded.safetensors", out);
      auto fu = SafetensorsFile::open(d / "unpadded.safetensors", MapMode::Shared);
      REQUIRE(fu->tensors().size() == 2);
      CHECK(!fu->file().shared());
      for (const TensorRef& t : fu->tensors()) CHECK(reinterpret_cast<uintptr_t>(t.data) % 8 == 0);
      float got[2];
      std::memcpy(got, fu->tensors()[0].data, 8);
      CHECK(got[0] == 1.5f);
      CHECK(got[1] == -2.25f);
      CHECK(static_cast<const uint8_t*>(fu->tensors()[1].data)[1] == 0x3f);
    }
  }

  TEST_CASE("safetensors: corrupted files are refused, naming file and tensor") {
    TempDir d;
    const std::string p = d / "model.safetensors";

    write_text(p, "abcde");
    CHECK_ERROR(SafetensorsFile::open(p), "model.safetensors", "too short");

    write_raw(p, "{}", 10, 1000000);
    CHECK_ERROR(SafetensorsFile::open(p), "model.safetensors", "header length 1000000");

    write_raw(p, R"({"a": {"dtype": "F32", )", 0);
    CHECK_ERROR(SafetensorsFile::open(p), "model.safetensors", "not valid JSON");

    write_raw(p, R"([1, 2])", 0);
    CHECK_ERROR(SafetensorsFile::open(p), "model.safetensors", "not a JSON object");

    write_raw(p, R"({"w":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", 8);
    CHECK_ERROR(SafetensorsFile::open(p), "model.safetensors", "tensor 'w'", "unknown dtype 'Q7'");

    write_raw(p, R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8);
    CHECK_ERROR(SafetensorsFile::open(p), "tensor 'w'", "shape");

    write_raw(p, R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8);
    CHECK_ERROR(SafetensorsFile::open(p), "tensor 'w'", "begin > end");

    write_raw(p, R"({"w":{"dtype":"F32","shape":[2]}})", 8);
    CHECK_ERROR(SafetensorsFile::open(p), "tensor 'w'", "data_offsets");

    write_raw(p, R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8);
    CHECK_ERROR(SafetensorsFile::open(p), "model.safetensors", "tensor 'w'", "[0, 16]",
                "past the end of the data section (8 bytes)");

    write_raw(p,
              R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
              12);
    CHECK_ERROR(SafetensorsFile::open(p), "'a'", "'b'", "overlap");

    // An empty tensor inside another's bytes owns nothing, so is no overlap.
    write_raw(p,
              R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
              R"("z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})",
              8);
    CHECK(SafetensorsFile::open(p)->tensors().size() == 2);

    // Inside the data section a tensor must start on its element size: kernels read it in place.
    write_raw(p,
              R"({"c":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
              R"("w":{"dtype":"F32","shape":[1],"data_offsets":[1,5]}})",
              5);
    CHECK_ERROR(SafetensorsFile::open(p), "tensor 'w'", "[1, 5]", "4-byte element size");

    write_raw(p, R"({"model.norm.weight":{"dtype":"BF16","shape":[64],"data_offsets":[0,100]}})",
              100);
    CHECK_ERROR(SafetensorsFile::open(p),
                "model.safetensors: tensor 'model.norm.weight': shape [64] needs 128 bytes but "
                "data_offsets span 100");

    // A shape whose byte count overflows 64 bits must not wrap around to a match.
    write_raw(p, R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})",
              0);
    CHECK_ERROR(SafetensorsFile::open(p), "tensor 'w'", "needs");
    write_raw(p, R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,16]}})",
              16);
    CHECK_ERROR(SafetensorsFile::open(p), "tensor 'w'", "needs more than 16 bytes");

    write_raw(p,
              R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
              R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
              8);
    CHECK_ERROR(SafetensorsFile::open(p), "tensor 'w'", "twice");

    write_raw(p, R"({"__metadata__":{"format":3}})", 0);
    CHECK_ERROR(SafetensorsFile::open(p), "__metadata__", "format");

    CHECK_ERROR(SafetensorsFile::open(d / "nope.safetensors"), "nope.safetensors", "cannot open");

    // A real file cut short, as by an interrupted download.
    std::string bytes = read_bytes(kTied + "/model.safetensors");
    write_text(p, bytes.substr(0, bytes.size() / 2));
    CHECK_ERROR(SafetensorsFile::open(p), "model.safetensors", "tensor '",
                "past the end of the data section");
    write_text(p, bytes.substr(0, 100));
    CHECK_ERROR(SafetensorsFile::open(p), "model.safetensors", "header length");
  }

  TEST_CASE("checkpoint folders: missing files and inconsistent shards") {
    TempDir d;
    CHECK_ERROR(Checkpoint::open(d.str()), d.str(), "model.safetensors",
                "model.safetensors.index.json");
    CHECK_ERROR(Checkpoint::open(d / "absent"), "absent", "folder");

    SUBCASE("missing shard") {
      link_sharded_fixture(d, false);
      write_text(d / "model.safetensors.index.json", index_json(fixture_weight_map()));
      CHECK_ERROR(Checkpoint::open(d.str()), kShard2, "missing");
    }
    SUBCASE("index matches: the symlinked copy loads") {
      link_sharded_fixture(d);
      write_text(d / "model.safetensors.index.json", index_json(fixture_weight_map()));
      Checkpoint ck = Checkpoint::open(d.str());
      CHECK(ck.all().size() == 36);
      CHECK_NOTHROW(bind_qwen3_weights(ck, load_qwen3_config(d.str())));
    }
    SUBCASE("tensor listed in the index but absent from its shard") {
      link_sharded_fixture(d);
      auto wm = fixture_weight_map();
      wm.push_back({"model.layers.9.mlp.up_proj.weight", kShard1});
      write_text(d / "model.safetensors.index.json", index_json(wm));
      CHECK_ERROR(Checkpoint::open(d.str()), "model.layers.9.mlp.up_proj.weight", kShard1,
                  "absent");
    }
    SUBCASE("tensor in a shard but not in the index") {
      link_sharded_fixture(d);
      auto wm = fixture_weight_map();
      std::string dropped;
      for (size_t i = 0; i < wm.size(); ++i)
        if (wm[i].first == "model.norm.weight") {
          dropped = wm[i].second;
          wm.erase(wm.begin() + long(i));
          break;
        }
      REQUIRE(!dropped.empty());
      write_text(d / "model.safetensors.index.json", index_json(wm));
      CHECK_ERROR(Checkpoint::open(d.str()), "model.norm.weight", dropped, "not in");
    }
    SUBCASE("index names the wrong shard") {
      link_sharded_fixture(d);
      auto wm = fixture_weight_map();
      for (auto& [n, f] : wm)
        if (n == "lm_head.weight") f = kShard1;
      write_text(d / "model.safetensors.index.json", index_json(wm));
      CHECK_ERROR(Checkpoint::open(d.str()), "lm_head.weight", kShard1);
    }
    SUBCASE("tensor present in two shards") {
      write_safetensors(d / "a.safetensors", {tensor_of("x", {2}), tensor_of("y", {2})});
      write_safetensors(d / "b.safetensors", {tensor_of("y", {2})});
      write_text(d / "model.safetensors.index.json",
                 index_json({{"x", "a.safetensors"}, {"y", "b.safetensors"}}));
      CHECK_ERROR(Checkpoint::open(d.str()), "'y'", "two shards", "a.safetensors", "b.safetensors");
    }
    SUBCASE("shard path escaping the folder") {
      write_text(d / "model.safetensors.index.json", index_json({{"x", "../x.safetensors"}}));
      CHECK_ERROR(Checkpoint::open(d.str()), "'x'", "../x.safetensors");
    }
    SUBCASE("index that is not JSON") {
      write_text(d / "model.safetensors.index.json", "{\"weight_map\": ");
      CHECK_ERROR(Checkpoint::open(d.str()), "model.safetensors.index.json", "invalid JSON");
    }
    SUBCASE("index without weight_map") {
      write_text(d / "model.safetensors.index.json", "{\"metadata\": {}}");
      CHECK_ERROR(Checkpoint::open(d.str()), "weight_map");
    }
  }

  TEST_CASE("config.json is refused when hearth cannot run the model") {
    Tiny t;
    auto parse = [&](const Fields& f) { return parse_qwen3_config(config_json(t, f), "cfg.json"); };
    Qwen3Config ok = parse({});
    CHECK(ok.head_dim == 6);
    CHECK(ok.eos_token_ids == std::vector<int32_t>{151645});

    CHECK_ERROR(parse({{"model_type", "\"llama\""}}), "cfg.json", "model_type", "llama");
    CHECK_ERROR(parse({{"model_type", ""}}), "model_type");
    CHECK_ERROR(parse({{"rope_scaling", R"({"rope_type":"yarn","factor":4.0})"}}), "rope_scaling",
                "yarn");
    CHECK_ERROR(parse({{"rope_scaling", R"({"type":"linear","factor":2.0})"}}), "rope_scaling");
    CHECK_ERROR(parse({{"rope_scaling", "4"}}), "rope_scaling");
    CHECK_NOTHROW(parse({{"rope_scaling", R"({"rope_type":"default"})"}}));
    CHECK_ERROR(parse({{"rope_parameters", R"({"rope_type":"llama3","rope_theta":5e5})"}}),
                "rope_parameters");
    CHECK_ERROR(parse({{"use_sliding_window", "true"}}), "use_sliding_window");
    CHECK_ERROR(parse({{"layer_types", R"(["full_attention","sliding_attention"])"}}),
                "layer_types");
    CHECK_ERROR(parse({{"hidden_act", "\"gelu\""}}), "hidden_act", "gelu");
    CHECK_ERROR(parse({{"attention_bias", "true"}}), "attention_bias");
    CHECK_ERROR(parse({{"num_key_value_heads", "3"}}), "num_attention_heads",
                "num_key_value_heads");
    CHECK_ERROR(parse({{"num_key_value_heads", ""}}), "num_key_value_heads", "missing");
    CHECK_ERROR(parse({{"head_dim", "7"}}), "head_dim", "even");
    CHECK_ERROR(parse({{"hidden_size", ""}}), "hidden_size", "missing");
    CHECK_ERROR(parse({{"hidden_size", "0"}}), "hidden_size");
    CHECK_ERROR(parse({{"intermediate_size", "-5"}}), "intermediate_size");
    CHECK_ERROR(parse({{"num_hidden_layers", "\"2\""}}), "num_hidden_layers");
    CHECK_ERROR(parse({{"vocab_size", "16.5"}}), "vocab_size");
    CHECK_ERROR(parse({{"rms_norm_eps", "0"}}), "rms_norm_eps");
    CHECK_ERROR(parse({{"rope_theta", "-1"}}), "rope_theta");
    CHECK_ERROR(parse({{"tie_word_embeddings", "1"}}), "tie_word_embeddings");
    CHECK_ERROR(parse_qwen3_config("{\"model_type\": \"qwen3\",", "cfg.json"), "cfg.json",
                "invalid JSON");
    CHECK_ERROR(parse_qwen3_config("[]", "cfg.json"), "cfg.json", "object");

    TempDir d;
    CHECK_ERROR(load_qwen3_config(d.str()), "config.json", "cannot open");
  }

  TEST_CASE("config.json defaults follow transformers' Qwen3Config") {
    Tiny t;
    Qwen3Config c = parse_qwen3_config(config_json(t, {{"head_dim", ""},
                                                       {"tie_word_embeddings", ""},
                                                       {"rope_theta", ""},
                                                       {"rms_norm_eps", ""},
                                                       {"max_position_embeddings", ""},
                                                       {"hidden_act", ""},
                                                       {"rope_scaling", ""},
                                                       {"num_key_value_heads", "null"},
                                                       {"eos_token_id", "[1, 2]"},
                                                       {"torch_dtype", ""},
                                                       {"dtype", "\"bfloat16\""}}),
                                       "cfg.json");
    CHECK(c.head_dim == 128);
    CHECK(!c.tie_word_embeddings);
    CHECK(c.rope_theta == 10000.0);
    CHECK(c.rms_norm_eps == 1e-6);
    CHECK(c.max_position_embeddings == 32768);
    CHECK(c.num_key_value_heads == c.num_attention_heads);
    CHECK(c.eos_token_ids == std::vector<int32_t>{1, 2});
    CHECK(c.torch_dtype == "bfloat16");

    // transformers 5 moves rope_theta into rope_parameters.
    Qwen3Config c5 = parse_qwen3_config(
        config_json(t, {{"rope_theta", ""},
                        {"rope_scaling", ""},
                        {"rope_parameters", R"({"rope_type":"default","rope_theta":5000000})"}}),
        "cfg.json");
    CHECK(c5.rope_theta == 5000000.0);
  }

  TEST_CASE("config hash is FNV-1a 64 of the file's bytes") {
    CHECK(fnv1a64_hex("", 0) == "cbf29ce484222325");
    CHECK(fnv1a64_hex("a", 1) == "af63dc4c8601ec8c");
    CHECK(fnv1a64_hex("foobar", 6) == "85944171f73967e8");
    Tiny t;
    std::string a = config_json(t), b = a + " ";
    CHECK(parse_qwen3_config(a, "x").config_hash == fnv1a64_hex(a.data(), a.size()));
    CHECK(parse_qwen3_config(a, "x").config_hash != parse_qwen3_config(b, "x").config_hash);
  }

  TEST_CASE("quantization_config is exposed, and binding validates it") {
    TempDir d;
    Tiny t;
    write_tiny(d, t, tiny_tensors(t),
               {{"quantization_config", R"({"quant_method": "hearth", "bits": 4})"}});
    Qwen3Config c = load_qwen3_config(d.str());
    CHECK(c.has_quantization_config);
    CHECK(contains(c.quantization_config_json, "\"bits\":4"));
    CHECK(contains(c.quantization_config_json, "\"quant_method\":\"hearth\""));
    CHECK_ERROR(bind_qwen3_weights(Checkpoint::open(d.str()), c), "'format_version' is missing");
  }

  TEST_CASE("generation_config.json: optional, falls back to config.json") {
    TempDir d;
    Tiny t;
    write_text(d / "config.json", config_json(t, {{"eos_token_id", "[7, 8]"}}));
    Qwen3Config c = load_qwen3_config(d.str());
    GenerationConfig g = load_generation_config(d.str(), c);
    CHECK(g.eos_token_ids == std::vector<int32_t>{7, 8});
    CHECK(g.bos_token_id == 151643);
    CHECK(!g.temperature.has_value());
    CHECK(!g.do_sample.has_value());

    write_text(d / "generation_config.json",
               R"({"eos_token_id": 5, "temperature": 1, "top_k": 0, "min_p": 0.05,
                   "repetition_penalty": 1.1, "do_sample": false, "top_p": null})");
    g = load_generation_config(d.str(), c);
    CHECK(g.eos_token_ids == std::vector<int32_t>{5});
    CHECK(g.temperature == 1.0);
    CHECK(g.top_k == 0);
    CHECK(g.min_p == doctest::Approx(0.05));
    CHECK(g.repetition_penalty == doctest::Approx(1.1));
    CHECK(g.do_sample == false);
    CHECK(!g.top_p.has_value());

    write_text(d / "generation_config.json", R"({"temperature": 0.7})");
    CHECK(load_generation_config(d.str(), c).eos_token_ids == std::vector<int32_t>{7, 8});

    write_text(d / "generation_config.json", R"({"top_k": "many"})");
    CHECK_ERROR(load_generation_config(d.str(), c), "generation_config.json", "top_k");
    write_text(d / "generation_config.json", R"({"eos_token_id": [1, "x"]})");
    CHECK_ERROR(load_generation_config(d.str(), c), "eos_token_id");
  }

  TEST_CASE("binding a written tiny checkpoint") {
    TempDir d;
    Tiny t;
    SUBCASE("tied, no lm_head: uses the embedding") {
      write_tiny(d, t, tiny_tensors(t));
      Qwen3Weights w = load_and_bind(d.str());
      CHECK(w.lm_head.data == w.embed.data);
      CHECK(w.layers[1].k_proj.shape_vec() == std::vector<int64_t>{6, 8});
      CHECK(w.layers[1].q_proj.shape_vec() == std::vector<int64_t>{12, 8});
    }
    SUBCASE("mixed dtypes are allowed") {
      auto ts = tiny_tensors(t, "BF16");
      ts[1] = tensor_of(ts[1].name, ts[1].shape, "F16");
      ts[2] = tensor_of(ts[2].name, ts[2].shape, "F32");
      write_tiny(d, t, ts);
      Qwen3Weights w = load_and_bind(d.str());
      CHECK(w.embed.dtype == DType::BF16);
      CHECK(w.layers[0].q_proj.dtype == DType::F16);
      CHECK(w.layers[0].k_proj.dtype == DType::F32);
    }
    SUBCASE("tied with an equal lm_head: accepted") {
      auto ts = tiny_tensors(t);
      ts.push_back(tensor_of("lm_head.weight", {t.vocab, t.hidden}));
      write_tiny(d, t, ts);
      Qwen3Weights w = load_and_bind(d.str());
      CHECK(w.lm_head.data == w.embed.data);
    }
    SUBCASE("tied with an equal lm_head in another dtype: compared by value") {
      auto ts = tiny_tensors(t, "BF16");
      ts.push_back(tensor_of("lm_head.weight", {t.vocab, t.hidden}, "F32"));
      write_tiny(d, t, ts);
      CHECK_NOTHROW(load_and_bind(d.str()));
    }
    SUBCASE("tied with a different lm_head: refused") {
      auto ts = tiny_tensors(t);
      ts.push_back(tensor_of("lm_head.weight", {t.vocab, t.hidden}, "F32", 0.5f));
      write_tiny(d, t, ts);
      CHECK_ERROR(load_and_bind(d.str()), "lm_head.weight", "tie_word_embeddings is true");
    }
    SUBCASE("tied with a different lm_head in another dtype: refused") {
      auto ts = tiny_tensors(t, "BF16");
      ts.push_back(tensor_of("lm_head.weight", {t.vocab, t.hidden}, "F32", 0.5f));
      write_tiny(d, t, ts);
      CHECK_ERROR(load_and_bind(d.str()), "lm_head.weight", "differs");
    }
    SUBCASE("untied without lm_head: refused") {
      t.tied = false;
      write_tiny(d, t, without(tiny_tensors(t), "lm_head.weight"));
      CHECK_ERROR(load_and_bind(d.str()),
                  "lm_head.weight missing and tie_word_embeddings is false");
    }
    SUBCASE("untied with lm_head: used") {
      t.tied = false;
      write_tiny(d, t, tiny_tensors(t));
      Qwen3Weights w = load_and_bind(d.str());
      CHECK(w.lm_head.data != w.embed.data);
      CHECK(w.lm_head.shape_vec() == std::vector<int64_t>{16, 8});
    }
    SUBCASE("missing tensor") {
      write_tiny(d, t, without(tiny_tensors(t), "model.layers.1.mlp.up_proj.weight"));
      CHECK_ERROR(load_and_bind(d.str()), "'model.layers.1.mlp.up_proj.weight'", "missing",
                  "[12, 8]");
    }
    SUBCASE("missing final norm") {
      write_tiny(d, t, without(tiny_tensors(t), "model.norm.weight"));
      CHECK_ERROR(load_and_bind(d.str()), "'model.norm.weight'", "missing");
    }
    SUBCASE("unexpected tensor") {
      auto ts = tiny_tensors(t);
      ts.push_back(tensor_of("model.layers.0.self_attn.q_proj.bias", {12}));
      write_tiny(d, t, ts);
      CHECK_ERROR(load_and_bind(d.str()),
                  "unexpected tensor 'model.layers.0.self_attn.q_proj.bias'");
    }
    SUBCASE("extra layer beyond num_hidden_layers") {
      Tiny more = t;
      more.layers = 3;
      write_tiny(d, t, tiny_tensors(more));
      CHECK_ERROR(load_and_bind(d.str()), "unexpected tensor 'model.layers.2.");
    }
    SUBCASE("wrong shape") {
      auto ts = tiny_tensors(t);
      for (auto& x : ts)
        if (x.name == "model.layers.0.self_attn.k_proj.weight") x = tensor_of(x.name, {12, 8});
      write_tiny(d, t, ts);
      CHECK_ERROR(load_and_bind(d.str()), "'model.layers.0.self_attn.k_proj.weight'", "[12, 8]",
                  "expected [6, 8]");
    }
    SUBCASE("transposed projection") {
      auto ts = tiny_tensors(t);
      for (auto& x : ts)
        if (x.name == "model.layers.1.mlp.down_proj.weight") x = tensor_of(x.name, {12, 8});
      write_tiny(d, t, ts);
      CHECK_ERROR(load_and_bind(d.str()), "down_proj", "[12, 8]", "expected [8, 12]");
    }
    SUBCASE("config that does not match the weights") {
      write_tiny(d, t, tiny_tensors(t), {{"head_dim", "4"}});
      CHECK_ERROR(load_and_bind(d.str()), "q_proj", "[12, 8]", "expected [8, 8]");
    }
    SUBCASE("unsupported weight dtype") {
      auto ts = tiny_tensors(t);
      for (auto& x : ts)
        if (x.name == "model.norm.weight") x = tensor_of(x.name, x.shape, "I32");
      write_tiny(d, t, ts);
      CHECK_ERROR(load_and_bind(d.str()), "'model.norm.weight'", "dtype I32");
    }
    SUBCASE("packed codes where a float weight belongs") {
      auto ts = tiny_tensors(t);
      for (auto& x : ts)
        if (x.name == "model.layers.0.mlp.gate_proj.weight") x = tensor_of(x.name, x.shape, "U8");
      write_tiny(d, t, ts);
      CHECK_ERROR(load_and_bind(d.str()), "gate_proj", "dtype U8");
    }
  }

  TEST_CASE("a weights file that is a FIFO, a folder or a symlink loop says so") {
    TempDir d;
    fs::copy_file(kModels + "/tiny-tied-bf16/config.json", d / "config.json");
    REQUIRE(::mkfifo((d / "model.safetensors").c_str(), 0600) == 0);
    CHECK_ERROR(Checkpoint::open(d.str(), MapMode::Shared), "model.safetensors",
                "not a regular file (a FIFO)");
    fs::remove(d / "model.safetensors");
    fs::create_directory(d / "model.safetensors");
    CHECK_ERROR(Checkpoint::open(d.str(), MapMode::Shared), "not a regular file (a folder)");
    fs::remove(d / "model.safetensors");
    fs::create_symlink("model.safetensors", d / "model.safetensors");
    CHECK_ERROR(Checkpoint::open(d.str(), MapMode::Shared), "model.safetensors",
                "Too many levels of symbolic links");
  }

  TEST_CASE("Qwen3-MoE configs and experts are checked by name") {
    const std::string dir = kModels + "/moe-tiny-bf16";
    std::ifstream cf(dir + "/config.json", std::ios::binary);
    const std::string cfg((std::istreambuf_iterator<char>(cf)), std::istreambuf_iterator<char>());
    auto with = [&](const std::string& from, const std::string& to) {
      std::string c = cfg;
      const size_t at = c.find(from);
      REQUIRE(at != std::string::npos);
      return c.replace(at, from.size(), to);
    };
    const Qwen3Config c = parse_qwen3_config(cfg, "cfg.json");
    CHECK(c.num_experts == 8);
    CHECK(c.num_experts_per_tok == 2);
    CHECK(c.moe_intermediate_size == 32);
    CHECK(c.norm_topk_prob);
    CHECK(c.sparse_layer(0));
    CHECK(!c.sparse_layer(1));  // mlp_only_layers [1]
    CHECK(c.sparse_layer(2));
    CHECK_ERROR(parse_qwen3_config(with("\"num_experts_per_tok\": 2", "\"num_experts_per_tok\": 9"),
                                   "cfg.json"),
                "num_experts_per_tok (9) is more than num_experts (8)");
    CHECK_ERROR(parse_qwen3_config(with("\"num_experts\": 8", "\"num_experts\": 0"), "cfg.json"),
                "num_experts is 0");
    CHECK_ERROR(
        parse_qwen3_config(with("\"mlp_only_layers\": [\n    1\n  ]", "\"mlp_only_layers\": [7]"),
                           "cfg.json"),
        "mlp_only_layers holds 7");
    CHECK_ERROR(
        parse_qwen3_config(with("\"moe_intermediate_size\": 32", "\"moe_intermediate_size\": -1"),
                           "cfg.json"),
        "moe_intermediate_size");
    // A checkpoint with one expert tensor left out, and one with a ninth expert's added.
    Checkpoint ck = Checkpoint::open(dir, MapMode::Shared);
    auto rewrite = [&](const TempDir& d, const std::string& drop, const std::string& extra) {
      fs::copy_file(dir + "/config.json", d / "config.json");
      std::vector<TensorToWrite> out;
      for (const TensorRef* r : ck.all()) {
        if (r->name == drop) continue;
        for (const std::string& name :
             {r->name, r->name == extra
                           ? std::string(r->name).replace(r->name.find(".7."), 3, ".8.")
                           : std::string()}) {
          if (name.empty()) continue;
          TensorToWrite t{name, r->dtype_str, r->shape, r->nbytes,
                          [r](uint8_t* dst) { std::memcpy(dst, r->data, r->nbytes); }};
          out.push_back(t);
        }
      }
      write_safetensors(d / "model.safetensors", out);
    };
    {
      TempDir d;
      rewrite(d, "model.layers.2.mlp.experts.5.up_proj.weight", "");
      Checkpoint c2 = Checkpoint::open(d.str(), MapMode::Shared);
      CHECK_ERROR(bind_qwen3_weights(c2, c), "model.layers.2.mlp.experts.5.up_proj.weight",
                  "is missing");
    }
    {
      TempDir d;
      rewrite(d, "", "model.layers.0.mlp.experts.7.down_proj.weight");
      Checkpoint c2 = Checkpoint::open(d.str(), MapMode::Shared);
      CHECK_ERROR(bind_qwen3_weights(c2, c), "unexpected tensor",
                  "model.layers.0.mlp.experts.8.down_proj.weight");
    }
  }

  TEST_CASE("weight copies hand a mapped checkpoint's pages back to the page cache, not the disk") {
    // A copy made with release drops the source pages from the process; for the checkpoint's
    // shared mapping (lend_mappings) they must stay in the page cache (mincore: resident), so the
    // next load copies from memory. PAGEOUT, right for other memory, would drop them.
    TempDir d;
    const size_t bytes = size_t(8) << 20;
    std::vector<uint8_t> data(bytes);
    for (size_t i = 0; i < bytes; ++i) data[i] = uint8_t(i * 2654435761u >> 24);
    {
      // Written back (clean pages, as a checkpoint's are: PAGEOUT would skip dirty ones).
      const int fd = ::open((d / "w.bin").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      REQUIRE(fd >= 0);
      REQUIRE(::write(fd, data.data(), bytes) == ssize_t(bytes));
      REQUIRE(::fsync(fd) == 0);
      ::close(fd);
    }
    MappedFile f(d / "w.bin", MapMode::Shared);
    REQUIRE(f.shared());
    CHECK(!MappedFile(d / "w.bin", MapMode::HugePageCopy).shared());
    WeightStore store;
    store.add_file_mapping(f.data(), f.size());
    const void* copy = store.get(f.data(), 0, bytes, [&](void* dst) {
      std::memcpy(dst, f.data(), bytes);  // touches every page of the mapping
    });
    CHECK(std::memcmp(copy, data.data(), bytes) == 0);
    const long page = ::sysconf(_SC_PAGESIZE);
    std::vector<unsigned char> resident(bytes / size_t(page));
    REQUIRE(::mincore(const_cast<uint8_t*>(f.data()), bytes, resident.data()) == 0);
    size_t in_cache = 0;
    for (unsigned char r : resident) in_cache += r & 1;
    CHECK(in_cache == resident.size());
    CHECK(std::memcmp(f.data(), data.data(), bytes) == 0);  // and the mapping still reads right
  }

  TEST_CASE("a weight cache: written by one load, mapped by the next, written again when stale") {
    TempDir d;
    const size_t bytes = size_t(8) << 20;
    {
      std::vector<uint8_t> data(bytes);
      for (size_t i = 0; i < bytes; ++i) data[i] = uint8_t(i * 2654435761u >> 24);
      std::ofstream(d / "w.bin", std::ios::binary)
          .write(reinterpret_cast<char*>(data.data()), std::streamsize(bytes));
    }
    MappedFile f(d / "w.bin", MapMode::Shared);
    const std::vector<uint8_t> other(5000, 9);  // in no file mapping: never cached
    const std::string cache = d / "m.weights";
    struct Load {
      int made = 0;
      std::string note;
    };
    // Three copies: two of the mapping (a big one and one smaller than a page), one of `other`.
    // Each is its source's bytes xor 0x5a, checked whether made or mapped.
    auto load = [&](const std::string& path, const std::string& identity) {
      Load l;
      WeightStore s;
      s.add_file_mapping(f.data(), f.size());
      s.use_cache(path, identity);
      auto copy = [&](const uint8_t* src, int layout, size_t n) {
        const auto* c = static_cast<const uint8_t*>(s.get(src, layout, n, [&](void* dst) {
          ++l.made;
          for (size_t i = 0; i < n; ++i) static_cast<uint8_t*>(dst)[i] = src[i] ^ 0x5a;
        }));
        size_t wrong = 0;
        for (size_t i = 0; i < n; ++i) wrong += c[i] != (src[i] ^ 0x5a);
        REQUIRE(wrong == 0);
      };
      copy(f.data() + 4096, 1, size_t(3) << 20);
      copy(f.data() + (size_t(5) << 20), 2, 1000);
      copy(other.data(), 1, other.size());
      l.note = s.commit_cache();
      return l;
    };
    Load l = load(cache, "A");
    CHECK(l.made == 3);
    CHECK(l.note.find("wrote") == 0);
    REQUIRE(fs::exists(cache));
    l = load(cache, "A");
    CHECK(l.made == 1);  // the two of the mapping come from the file
    CHECK(l.note.empty());
    l = load(cache, "B");  // another build or checkpoint
    CHECK(l.made == 3);
    CHECK(l.note.find("wrote") == 0);
    CHECK(load(cache, "B").made == 1);

    // A copy's bytes changed on disk: found by its checksum and made again, and the file is
    // written again whole, the other copy taken from the old one.
    {
      const int fd = ::open(cache.c_str(), O_WRONLY);
      REQUIRE(fd >= 0);
      const uint8_t x = 0;
      REQUIRE(::pwrite(fd, &x, 1, 12345) == 1);
      ::close(fd);
    }
    l = load(cache, "B");
    CHECK(l.made == 2);
    CHECK(l.note.find("damaged") != std::string::npos);
    CHECK(load(cache, "B").made == 1);

    // Cut short, or not a cache at all: written again.
    fs::resize_file(cache, fs::file_size(cache) - 1);
    CHECK(load(cache, "B").made == 3);
    CHECK(load(cache, "B").made == 1);
    std::ofstream(cache, std::ios::binary) << "not a weight cache";
    CHECK(load(cache, "B").made == 3);
    CHECK(load(cache, "B").made == 1);

    // A store on the mapping with a cache made for "B", and a maker that counts its copies.
    int made = 0;
    auto store = [&](const std::string& path, uint64_t expect_bytes = 0) {
      auto s = std::make_unique<WeightStore>();
      s->add_file_mapping(f.data(), f.size());
      s->use_cache(path, "B", expect_bytes);
      made = 0;
      return s;
    };
    auto count = [&](void* dst) { ++made, std::memset(dst, 1, 100); };

    // A load that asks for a copy the file lacks writes it again with every copy.
    {
      auto s = store(cache);
      s->get(f.data() + 4096, 1, size_t(3) << 20, count);
      s->get(f.data() + 4096, 3, 100, count);  // a layout the file lacks
      s->get(f.data() + (size_t(5) << 20), 2, 1000, count);
      CHECK(made == 1);
      CHECK(s->commit_cache().find("lacked a copy") != std::string::npos);
    }
    CHECK(load(cache, "B").made == 1);  // and the old copies are still in it
    {
      // After the load's commit, a copy the file lacks is made in memory; the file stays.
      auto s = store(cache);
      s->get(f.data() + 4096, 1, size_t(3) << 20, count);
      CHECK(s->cache_mapped());
      CHECK(s->commit_cache().empty());
      s->get(f.data() + 4096, 4, 100, count);
      CHECK(made == 1);
      CHECK(s->commit_cache().empty());
    }
    CHECK(load(cache, "B").made == 1);

    // A file that would fill the disk is not written.
    {
      auto s = store(d / "big.weights", uint64_t(1) << 60);
      s->get(f.data(), 1, 100, count);
      CHECK(made == 1);
      CHECK(s->commit_cache().find("would take over half of its disk") != std::string::npos);
      CHECK(!fs::exists(d / "big.weights"));
    }

    // Nowhere to write: the copies are made in memory, and the note says why.
    l = load(d / "missing/m.weights", "B");
    CHECK(l.made == 3);
    CHECK(l.note.find("cannot write a weight cache") == 0);
    CHECK(!fs::exists(d / "missing"));
  }

  TEST_CASE("a checkpoint's weight cache is one file per folder, stale when a file changes") {
    TempDir d;
    fs::copy(kModels + "/tiny-tied-bf16", d / "m");
    fs::create_directory(d / "cache");
    auto load = [&](const std::string& variant = "") {
      Checkpoint c = Checkpoint::open(d / "m");
      WeightStore s;
      c.lend_mappings(s);
      c.cache_weights(s, d / "cache", variant);
      int made = 0;
      const TensorRef* t = c.all()[0];
      s.get(t->data, 0, t->nbytes, [&](void* dst) {
        ++made;
        std::memcpy(dst, t->data, t->nbytes);
      });
      s.commit_cache();
      return made;
    };
    CHECK(load() == 1);
    CHECK(load() == 0);
    CHECK(load("avx2") == 1);  // a forced ISA's copies get their own file
    CHECK(load("avx2") == 0);
    CHECK(load() == 0);
    int files = 0;
    for (const auto& e : fs::directory_iterator(d / "cache")) {
      ++files;
      CHECK(e.path().filename().string().rfind("m-", 0) == 0);
    }
    CHECK(files == 2);
    // config.json rewritten (same bytes, a new time): the cache is stale.
    {
      std::stringstream cfg;
      cfg << std::ifstream(d / "m/config.json", std::ios::binary).rdbuf();
      fs::remove(d / "m/config.json");
      std::ofstream(d / "m/config.json", std::ios::binary) << cfg.str();
    }
    CHECK(load() == 1);
    CHECK(load() == 0);

    // A moved or deleted checkpoint's file goes when another one is written there.
    fs::copy(d / "m", d / "m2");
    {
      Checkpoint c = Checkpoint::open(d / "m2");
      WeightStore s;
      c.lend_mappings(s);
      c.cache_weights(s, d / "cache", "");
      s.get(c.all()[0]->data, 0, 64, [&](void* dst) { std::memset(dst, 0, 64); });
      CHECK(s.commit_cache().find("wrote") == 0);
    }
    fs::rename(d / "m2", d / "m3");
    // A file a load was writing under a name (where unnamed files are refused) when it died: the
    // pid is above any pid_max.
    std::ofstream(d / "cache/x.weights.part4194999") << "half written";
    auto count_files = [&] {
      return std::distance(fs::directory_iterator(d / "cache"), fs::directory_iterator());
    };
    CHECK(count_files() == 4);
    CHECK(load("scalar") == 1);  // writes one more; m2's and the half-written one go, m's stay
    CHECK(count_files() == 3);
    CHECK(!fs::exists(d / "cache/x.weights.part4194999"));
    CHECK(load() == 0);
  }

  TEST_CASE("handing back a few bytes of a mapped checkpoint drops the 2 MiB around them") {
    // The page cache may hold a checkpoint in 2 MiB pages, and reading one norm then maps all of
    // its page: the hand back must unmap that much (pagemap's present bit), and no more.
    TempDir d;
    const size_t bytes = size_t(8) << 20, huge = size_t(2) << 20;
    {
      std::vector<uint8_t> data(bytes, 7);
      const int fd = ::open((d / "w.bin").c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      REQUIRE(fd >= 0);
      REQUIRE(::write(fd, data.data(), bytes) == ssize_t(bytes));
      ::close(fd);
    }
    MappedFile f(d / "w.bin", MapMode::Shared);
    WeightStore store;
    store.add_file_mapping(f.data(), f.size());
    const long page = ::sysconf(_SC_PAGESIZE);
    auto mapped = [&](size_t off) {
      const int fd = ::open("/proc/self/pagemap", O_RDONLY);
      REQUIRE(fd >= 0);
      uint64_t entry = 0;
      const off_t at = off_t((uintptr_t(f.data()) + off) / uintptr_t(page) * 8);
      REQUIRE(::pread(fd, &entry, 8, at) == 8);
      ::close(fd);
      return (entry >> 63) & 1;
    };
    unsigned sum = 0;
    for (size_t i = 0; i < bytes; i += size_t(page)) sum += f.data()[i];  // maps every page
    CHECK(sum == 7 * bytes / size_t(page));
    const uint8_t* base = f.data();
    const size_t first = (uintptr_t(base) + huge - 1) / huge * huge - uintptr_t(base);  // aligned
    store.hand_back(base + first + huge + 100, 2048);  // inside one 2 MiB page, not a whole 4 KiB
    CHECK(mapped(first + huge - size_t(page)));
    for (size_t off = first + huge; off < first + 2 * huge; off += 64 * size_t(page))
      CHECK(!mapped(off));
    CHECK(mapped(first + 2 * huge));
    CHECK(base[first + huge + 100] == 7);  // and the mapping still reads right
  }
}
