#include "models/standin.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/json_writer.h"
#include "models/safetensors_writer.h"

namespace hearth {

namespace fs = std::filesystem;

namespace {

uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t s = a ^ (b * 0xd1342543de82ef95ull);
  return splitmix64(s);
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

// xoshiro256**, seeded through splitmix64.
struct Rng {
  uint64_t s[4];
  explicit Rng(uint64_t seed) {
    for (auto& x : s) x = splitmix64(seed);
  }
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t next() {
    uint64_t r = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
  }
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }
};

// Uniform in (0, 1]: never 0, so log() is finite.
inline float open_unit(uint32_t bits) {
  return (float(bits) + 0.5f) * 0x1.0p-32f;
}

// Two unit-variance samples per call: normal by Box-Muller, or Student-t with 4 degrees of freedom
// (normal / sqrt(chi2_4 / 4), chi2_4 = -2 ln(u u'), divided by sqrt(2) for unit variance).
inline void sample_pair(Rng& rng, bool heavy, float* out) {
  uint64_t x = rng.next();
  float r = std::sqrt(-2.f * std::log(open_unit(uint32_t(x >> 32))));
  float theta = 6.28318530717958648f * float(uint32_t(x)) * 0x1.0p-32f;
  float z0 = r * std::cos(theta), z1 = r * std::sin(theta);
  if (heavy) {
    uint64_t a = rng.next(), b = rng.next();
    float va = -2.f * std::log(open_unit(uint32_t(a >> 32)) * open_unit(uint32_t(a)));
    float vb = -2.f * std::log(open_unit(uint32_t(b >> 32)) * open_unit(uint32_t(b)));
    z0 *= std::sqrt(2.f / va);
    z1 *= std::sqrt(2.f / vb);
  }
  out[0] = z0;
  out[1] = z1;
}

// Each chunk has its own random stream, so the bytes do not depend on how chunks are spread over
// threads.
constexpr size_t kChunk = size_t(1) << 16;

enum class Kind { Matrix, Norm };

struct TensorPlan {
  std::string name;
  std::vector<int64_t> shape;  // [rows, cols] or [n]
  Kind kind = Kind::Matrix;
  float stddev = 0.f;                         // Matrix: value = stddev * sample * column scale
  const std::vector<float>* scale = nullptr;  // per column (Matrix) or element (Norm); may be null
  int64_t numel() const {
    int64_t n = 1;
    for (auto d : shape) n *= d;
    return n;
  }
};

struct Format {
  const char* st_name;     // safetensors dtype
  const char* torch_name;  // config.json torch_dtype
  size_t bytes;
};

Format format_of(const std::string& dtype) {
  if (dtype == "BF16") return {"BF16", "bfloat16", 2};
  if (dtype == "F16") return {"F16", "float16", 2};
  if (dtype == "F32") return {"F32", "float32", 4};
  fail("standin: dtype \"", dtype, "\" is not one of BF16, F16, F32");
}

void store(const Format& f, const float* src, uint8_t* dst, size_t n) {
  if (f.bytes == 4) {
    std::memcpy(dst, src, n * 4);
    return;
  }
  bool bf = f.st_name[0] == 'B';
  for (size_t i = 0; i < n; ++i) {
    uint16_t h = bf ? f32_to_bf16(src[i]) : f32_to_f16(src[i]);
    std::memcpy(dst + 2 * i, &h, 2);  // little-endian hosts only, like the rest of hearth
  }
}

void fill_tensor(const TensorPlan& t, const StandinSpec& spec, const Format& f, uint8_t* dst,
                 int threads) {
  const size_t n = size_t(t.numel());
  const size_t cols = size_t(t.shape.back());
  const uint64_t tseed = mix(spec.seed, fnv1a(t.name));
  const size_t nchunks = (n + kChunk - 1) / kChunk;
  std::atomic<size_t> next{0};
  auto work = [&] {
    std::vector<float> buf(kChunk + 1);
    for (size_t c; (c = next.fetch_add(1)) < nchunks;) {
      size_t begin = c * kChunk, len = std::min(kChunk, n - begin);
      Rng rng(mix(tseed, c));
      for (size_t i = 0; i < len; i += 2) sample_pair(rng, spec.heavy_tailed, &buf[i]);
      if (t.kind == Kind::Norm) {
        for (size_t i = 0; i < len; ++i) buf[i] = 1.f + 0.05f * buf[i];
      } else {
        for (size_t i = 0; i < len; ++i) buf[i] *= t.stddev;
      }
      if (t.scale) {
        const float* sc = t.scale->data();
        for (size_t i = 0, col = begin % cols; i < len; ++i) {
          buf[i] *= sc[col];
          if (++col == cols) col = 0;
        }
      }
      store(f, buf.data(), dst + begin * f.bytes, len);
    }
  };
  int nt = int(std::min<size_t>(size_t(std::max(threads, 1)), nchunks));
  std::vector<std::thread> pool;
  for (int i = 1; i < nt; ++i) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
}

// Outlier channels along one dimension: `sets` disjoint groups of `count` channels, each
// channel scaled by a factor in [8, 20], from a stream that depends only on the seed and the
// dimension's role.
std::vector<std::vector<float>> outlier_scales(const StandinSpec& spec, const std::string& role,
                                               int dim, int sets, int count) {
  std::vector<std::vector<float>> out(size_t(sets), std::vector<float>(size_t(dim), 1.f));
  Rng rng(mix(spec.seed, fnv1a("outliers/" + role)));
  std::vector<int> perm(static_cast<size_t>(dim));
  for (int i = 0; i < dim; ++i) perm[size_t(i)] = i;
  for (int i = 0; i < count * sets; ++i) {
    int j = i + int(rng.next() % uint64_t(dim - i));
    std::swap(perm[size_t(i)], perm[size_t(j)]);
    out[size_t(i / count)][size_t(perm[size_t(i)])] = float(8.0 + 12.0 * rng.uniform());
  }
  return out;
}

// Python's repr() of a float, as json.dump writes it: shortest round-trip digits, exponent form
// outside [1e-4, 1e16), otherwise positional with at least one decimal.
std::string py_float(double v) {
  if (v == 0) return std::signbit(v) ? "-0.0" : "0.0";
  char buf[40];
  for (int prec = 1; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*e", prec - 1, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  std::string m(buf);
  std::string sign;
  if (m[0] == '-') {
    sign = "-";
    m.erase(0, 1);
  }
  size_t epos = m.find('e');
  int exp = std::atoi(m.c_str() + epos + 1);
  std::string digits = m.substr(0, epos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  if (exp < -4 || exp >= 16) {
    std::string out = sign + digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char e[16];
    std::snprintf(e, sizeof e, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return out + e;
  }
  if (exp < 0) return sign + "0." + std::string(size_t(-exp - 1), '0') + digits;
  std::string ip = digits.substr(0, std::min(digits.size(), size_t(exp + 1)));
  ip += std::string(size_t(exp + 1) - ip.size(), '0');
  std::string fp = digits.size() > size_t(exp + 1) ? digits.substr(size_t(exp + 1)) : "0";
  return sign + ip + "." + fp;
}

void write_text(const fs::path& path, const std::string& text) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.string().c_str(), "wb"), &std::fclose);
  if (!f) fail(path.string(), ": cannot open for writing");
  if (std::fwrite(text.data(), 1, text.size(), f.get()) != text.size() || std::fflush(f.get()) != 0)
    fail(path.string(), ": write failed (disk full?)");
}

void validate(const StandinSpec& s) {
  auto positive = [](const char* field, int v) {
    if (v <= 0) fail("standin: ", field, " must be > 0, got ", v, " (standin_preset fills it)");
  };
  positive("hidden", s.hidden);
  positive("intermediate", s.intermediate);
  positive("layers", s.layers);
  positive("heads", s.heads);
  positive("kv_heads", s.kv_heads);
  positive("head_dim", s.head_dim);
  positive("vocab", s.vocab);
  positive("max_position", s.max_position);
  positive("shards", s.shards);
  if (s.heads % s.kv_heads != 0)
    fail("standin: heads (", s.heads, ") must be a multiple of kv_heads (", s.kv_heads, ")");
  if (s.head_dim % 2 != 0) fail("standin: head_dim must be even for RoPE, got ", s.head_dim);
  if (!(s.rope_theta > 0)) fail("standin: rope_theta must be > 0, got ", s.rope_theta);
  if (!(s.rms_eps > 0)) fail("standin: rms_eps must be > 0, got ", s.rms_eps);
  if (s.experts < 0 || (s.experts > 0 && (s.experts_per_tok < 1 || s.experts_per_tok > s.experts ||
                                          s.moe_intermediate < 1)))
    fail("standin: experts ", s.experts, ", experts_per_tok ", s.experts_per_tok,
         " and moe_intermediate ", s.moe_intermediate, " do not make a mixture of experts");
  // The hidden dimension holds three disjoint outlier sets (see write_standin).
  int max_outliers = std::min({s.hidden / 3, s.intermediate, s.heads * s.head_dim});
  if (s.outlier_channels < 0 || s.outlier_channels > max_outliers)
    fail("standin: outlier_channels must be in [0, ", max_outliers, "], got ", s.outlier_channels);
  if (s.key_outlier_channels < 0 || s.key_outlier_channels > s.head_dim / 4)
    fail("standin: key_outlier_channels must be in [0, ", s.head_dim / 4, "], got ",
         s.key_outlier_channels);
  format_of(s.dtype);
}

std::string config_json(const StandinSpec& s, const Format& f) {
  std::string j = "{\n";
  auto kv = [&](const std::string& k, const std::string& v) {
    j += "  \"" + k + "\": " + v + ",\n";
  };
  auto num = [](int64_t v) { return std::to_string(v); };
  auto b = [](bool v) { return std::string(v ? "true" : "false"); };
  const bool moe = s.experts > 0;
  j += std::string("  \"architectures\": [\n    \"") +
       (moe ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM") + "\"\n  ],\n";
  kv("attention_bias", "false");
  kv("attention_dropout", "0.0");
  kv("bos_token_id", "151643");
  kv("eos_token_id", "151645");
  kv("head_dim", num(s.head_dim));
  j += "  \"hearth_standin\": {\n    \"heavy_tailed\": " + b(s.heavy_tailed) +
       ",\n    \"key_outlier_channels\": " + num(s.key_outlier_channels) +
       ",\n    \"outlier_channels\": " + num(s.outlier_channels) +
       ",\n    \"preset\": " + json_quote(s.preset) + ",\n    \"seed\": " + std::to_string(s.seed) +
       "\n  },\n";
  kv("hidden_act", "\"silu\"");
  kv("hidden_size", num(s.hidden));
  kv("initializer_range", "0.02");
  kv("intermediate_size", num(s.intermediate));
  kv("max_position_embeddings", num(s.max_position));
  kv("max_window_layers", num(s.layers));
  if (moe) {
    kv("decoder_sparse_step", "1");
    kv("mlp_only_layers", "[]");
    kv("moe_intermediate_size", num(s.moe_intermediate));
    kv("norm_topk_prob", "true");
    kv("num_experts", num(s.experts));
    kv("num_experts_per_tok", num(s.experts_per_tok));
  }
  kv("model_type", moe ? "\"qwen3_moe\"" : "\"qwen3\"");
  kv("num_attention_heads", num(s.heads));
  kv("num_hidden_layers", num(s.layers));
  kv("num_key_value_heads", num(s.kv_heads));
  kv("rms_norm_eps", py_float(s.rms_eps));
  kv("rope_scaling", "null");
  kv("rope_theta", py_float(s.rope_theta));
  kv("sliding_window", "null");
  kv("tie_word_embeddings", b(s.tied));
  kv("torch_dtype", std::string("\"") + f.torch_name + "\"");
  kv("transformers_version", "\"4.51.0\"");
  kv("use_cache", "true");
  kv("use_sliding_window", "false");
  j += "  \"vocab_size\": " + num(s.vocab) + "\n}\n";
  return j;
}

const char* kGenerationConfig =
    "{\n"
    "  \"bos_token_id\": 151643,\n"
    "  \"do_sample\": true,\n"
    "  \"eos_token_id\": [\n"
    "    151645,\n"
    "    151643\n"
    "  ],\n"
    "  \"pad_token_id\": 151643,\n"
    "  \"temperature\": 0.6,\n"
    "  \"top_k\": 20,\n"
    "  \"top_p\": 0.95,\n"
    "  \"transformers_version\": \"4.51.0\"\n"
    "}\n";

// Splits the tensors, in model order, into exactly `shards` non-empty contiguous runs of roughly
// equal bytes, the way Hugging Face fills shards in state-dict order.
std::vector<int> assign_shards(const std::vector<TensorPlan>& plan, size_t elem_bytes, int shards) {
  if (size_t(shards) > plan.size())
    fail("standin: shards (", shards, ") exceeds the number of tensors (", plan.size(), ")");
  double remaining = 0;
  for (auto& t : plan) remaining += double(t.numel()) * double(elem_bytes);
  std::vector<int> out(plan.size());
  int s = 0;
  double cur = 0, target = remaining / shards;
  for (size_t i = 0; i < plan.size(); ++i) {
    double bytes = double(plan[i].numel()) * double(elem_bytes);
    size_t left = plan.size() - i;  // tensors not yet placed, this one included
    bool must_open = size_t(shards - 1 - s) == left;
    if (s < shards - 1 && cur > 0 && (must_open || cur + bytes > target)) {
      ++s;
      target = remaining / (shards - s);
      cur = 0;
    }
    out[i] = s;
    cur += bytes;
    remaining -= bytes;
  }
  return out;
}

std::string shard_name(int k, int n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", k, n);
  return buf;
}

}  // namespace

void check_standin_tokenizer(const std::string& tokenizer_dir) {
  if (tokenizer_dir.empty()) return;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
    fs::path src = fs::path(tokenizer_dir) / name;
    if (!fs::is_regular_file(src))
      fail(src.string(), ": not found (the stand-in needs the Qwen3 tokenizer files)");
  }
}

StandinSpec standin_preset(const std::string& name) {
  StandinSpec s;
  s.preset = name;
  auto set = [&](int hidden, int inter, int layers, int heads, int kv, int hd, bool tied) {
    s.hidden = hidden;
    s.intermediate = inter;
    s.layers = layers;
    s.heads = heads;
    s.kv_heads = kv;
    s.head_dim = hd;
    s.tied = tied;
  };
  if (name == "0.6b")
    set(1024, 3072, 28, 16, 8, 128, true);
  else if (name == "1.7b")
    set(2048, 6144, 28, 16, 8, 128, true);
  else if (name == "4b")
    set(2560, 9728, 36, 32, 8, 128, true);
  else if (name == "8b")
    set(4096, 12288, 36, 32, 8, 128, false);
  else if (name == "30b-a3b")  // Qwen3-30B-A3B: 128 experts of 768, 8 per token
    set(2048, 6144, 48, 32, 4, 128, false), s.experts = 128, s.experts_per_tok = 8,
                                            s.moe_intermediate = 768;
  else if (name == "tiny")
    set(64, 160, 2, 4, 2, 32, true);
  else if (name == "moe-tiny")
    set(64, 160, 2, 4, 2, 32, true), s.experts = 8, s.experts_per_tok = 2, s.moe_intermediate = 32;
  else
    fail("standin: unknown preset \"", name,
         "\" (valid: 0.6b, 1.7b, 4b, 8b, 30b-a3b, tiny, moe-tiny)");
  return s;
}

struct StandinSource::Impl {
  explicit Impl(const StandinSpec& s);
  StandinSpec spec;
  Format f;
  // Outlier channel scales, which the plan points into.
  std::vector<std::vector<float>> hid, attn, mid, keys;
  std::vector<TensorPlan> plan;
};

StandinSource::Impl::Impl(const StandinSpec& s) : spec(s), f(format_of(s.dtype)) {
  validate(spec);

  const int h = spec.hidden, q = spec.heads * spec.head_dim, kv = spec.kv_heads * spec.head_dim;
  const int inter = spec.intermediate;
  // Three disjoint sets along the hidden dimension: norm channels, q/k/v/gate/up columns and
  // embedding (= tied lm_head) columns. Were they the same channels, a norm outlier would meet a
  // column outlier and the product (8-20x squared) would dominate every projection, the residual
  // stream and the logits: the random model would put all its probability on one token.
  const std::vector<float>* s_norm = nullptr;
  const std::vector<float>* s_in = nullptr;
  const std::vector<float>* s_embed = nullptr;
  const std::vector<float>* s_attn = nullptr;
  const std::vector<float>* s_mid = nullptr;
  if (spec.outlier_channels > 0) {
    hid = outlier_scales(spec, "hidden", h, 3, spec.outlier_channels);
    attn = outlier_scales(spec, "attn", q, 1, spec.outlier_channels);
    mid = outlier_scales(spec, "intermediate", inter, 1, spec.outlier_channels);
    s_norm = &hid[0];
    s_in = &hid[1];
    s_embed = &hid[2];
    s_attn = &attn[0];
    s_mid = &mid[0];
  }
  // Inputs to q/k/v/gate/up are RMS-normalised (O(1) per channel), so 1/sqrt(fan_in) keeps their
  // outputs O(1). The two projections that write into the residual stream are further divided by
  // sqrt(2 * layers) so that 2 * layers random-direction updates add up to O(1), not O(sqrt(L)).
  const float in_std = float(1.0 / std::sqrt(double(h)));
  const float residual = float(1.0 / std::sqrt(2.0 * spec.layers));
  const float o_std = float(1.0 / std::sqrt(double(q))) * residual;
  const float down_std = float(1.0 / std::sqrt(double(inter))) * residual;

  const std::vector<float>* s_knorm = nullptr;
  if (spec.key_outlier_channels > 0) {
    keys = outlier_scales(spec, "k_norm", spec.head_dim, 1, spec.key_outlier_channels);
    s_knorm = &keys[0];
  }

  auto matrix = [&](std::string name, int rows, int cols, float sd,
                    const std::vector<float>* scale) {
    plan.push_back({std::move(name), {rows, cols}, Kind::Matrix, sd, scale});
  };
  auto norm = [&](std::string name, int n, const std::vector<float>* scale) {
    plan.push_back({std::move(name), {n}, Kind::Norm, 0.f, scale});
  };
  matrix("model.embed_tokens.weight", spec.vocab, h, 0.02f, s_embed);
  for (int i = 0; i < spec.layers; ++i) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    matrix(p + "self_attn.q_proj.weight", q, h, in_std, s_in);
    matrix(p + "self_attn.k_proj.weight", kv, h, in_std, s_in);
    matrix(p + "self_attn.v_proj.weight", kv, h, in_std, s_in);
    matrix(p + "self_attn.o_proj.weight", h, q, o_std, s_attn);
    norm(p + "self_attn.q_norm.weight", spec.head_dim, nullptr);
    norm(p + "self_attn.k_norm.weight", spec.head_dim, s_knorm);
    if (spec.experts > 0) {
      const int mi = spec.moe_intermediate;
      const float expert_down_std = float(1.0 / std::sqrt(double(mi))) * residual;
      matrix(p + "mlp.gate.weight", spec.experts, h, in_std, s_in);
      for (int e = 0; e < spec.experts; ++e) {
        const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        matrix(x + "gate_proj.weight", mi, h, in_std, s_in);
        matrix(x + "up_proj.weight", mi, h, in_std, s_in);
        matrix(x + "down_proj.weight", h, mi, expert_down_std, s_mid);
      }
    } else {
      matrix(p + "mlp.gate_proj.weight", inter, h, in_std, s_in);
      matrix(p + "mlp.up_proj.weight", inter, h, in_std, s_in);
      matrix(p + "mlp.down_proj.weight", h, inter, down_std, s_mid);
    }
    norm(p + "input_layernorm.weight", h, s_norm);
    norm(p + "post_attention_layernorm.weight", h, s_norm);
  }
  norm("model.norm.weight", h, s_norm);
  if (!spec.tied) matrix("lm_head.weight", spec.vocab, h, in_std, s_embed);
}

StandinSource::StandinSource(const StandinSpec& spec) : impl_(std::make_unique<Impl>(spec)) {}
StandinSource::~StandinSource() = default;

size_t StandinSource::size() const {
  return impl_->plan.size();
}
const std::string& StandinSource::name(size_t i) const {
  return impl_->plan.at(i).name;
}
const std::vector<int64_t>& StandinSource::shape(size_t i) const {
  return impl_->plan.at(i).shape;
}
const char* StandinSource::dtype() const {
  return impl_->f.st_name;
}
size_t StandinSource::nbytes(size_t i) const {
  return size_t(impl_->plan.at(i).numel()) * impl_->f.bytes;
}
void StandinSource::fill(size_t i, uint8_t* dst, int threads) const {
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  fill_tensor(impl_->plan.at(i), impl_->spec, impl_->f, dst, threads);
}

void write_standin(const std::string& dir, const StandinSpec& spec,
                   const std::string& tokenizer_dir, int threads) {
  const StandinSource src(spec);
  const std::vector<TensorPlan>& plan = src.impl_->plan;
  const Format f = src.impl_->f;
  if (threads <= 0) threads = int(std::max(1u, std::thread::hardware_concurrency()));
  check_standin_tokenizer(tokenizer_dir);

  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail(dir, ": cannot create directory: ", ec.message());
  const fs::path d(dir);

  // A stale single file or index from an earlier write with another shard count would win over
  // (or mix with) the new files in a loader.
  std::vector<fs::path> stale;
  for (auto& e : fs::directory_iterator(d, ec)) {
    std::string n = e.path().filename().string();
    bool shard = n.rfind("model-", 0) == 0 && n.find("-of-") != std::string::npos &&
                 n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0;
    if (shard || n == "model.safetensors" || n == "model.safetensors.index.json")
      stale.push_back(e.path());
  }
  for (auto& p : stale) fs::remove(p, ec);

  const std::vector<int> shard = assign_shards(plan, f.bytes, spec.shards);
  std::map<std::string, std::string> weight_map;
  uint64_t total_bytes = 0;
  for (int s = 0; s < spec.shards; ++s) {
    // Within a file, tensors are sorted by name, as the safetensors Python writer does.
    std::vector<const TensorPlan*> members;
    for (size_t i = 0; i < plan.size(); ++i)
      if (shard[i] == s) members.push_back(&plan[i]);
    std::sort(members.begin(), members.end(),
              [](const TensorPlan* a, const TensorPlan* b) { return a->name < b->name; });
    std::string file = spec.shards == 1 ? "model.safetensors" : shard_name(s + 1, spec.shards);
    std::vector<TensorToWrite> tw;
    for (const TensorPlan* t : members) {
      TensorToWrite w;
      w.name = t->name;
      w.dtype = f.st_name;
      w.shape = t->shape;
      w.nbytes = size_t(t->numel()) * f.bytes;
      w.fill = [t, &spec, f, threads](uint8_t* dst) { fill_tensor(*t, spec, f, dst, threads); };
      tw.push_back(std::move(w));
      weight_map[t->name] = file;
      total_bytes += uint64_t(t->numel()) * f.bytes;
    }
    write_safetensors((d / file).string(), tw, {{"format", "pt"}});
  }

  if (spec.shards > 1) {
    std::string idx = "{\n  \"metadata\": {\n    \"total_size\": " + std::to_string(total_bytes) +
                      "\n  },\n  \"weight_map\": {\n";
    size_t i = 0;
    for (auto& [name, file] : weight_map)
      idx += "    " + json_quote(name) + ": " + json_quote(file) +
             (++i < weight_map.size() ? ",\n" : "\n");
    idx += "  }\n}\n";
    write_text(d / "model.safetensors.index.json", idx);
  }
  write_standin_files(dir, spec, tokenizer_dir);
}

void write_standin_files(const std::string& dir, const StandinSpec& spec,
                         const std::string& tokenizer_dir) {
  check_standin_tokenizer(tokenizer_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) fail(dir, ": cannot create directory: ", ec.message());
  const fs::path d(dir);
  write_text(d / "config.json", config_json(spec, format_of(spec.dtype)));
  write_text(d / "generation_config.json", kGenerationConfig);
  if (tokenizer_dir.empty()) return;
  for (const char* name : {"tokenizer.json", "tokenizer_config.json"}) {
    fs::path src = fs::path(tokenizer_dir) / name;
    // copy_file carries over the source's permissions, and the shared tokenizer is read-only:
    // without owner-write a second write into this dir could not replace the copy.
    fs::path dst = d / name;
    fs::remove(dst, ec);
    fs::copy_file(src, dst, ec);
    if (!ec)
      fs::permissions(dst, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::add,
                      ec);
    if (ec) fail(src.string(), ": cannot copy to ", dir, ": ", ec.message());
  }
}

}  // namespace hearth
