#include "models/qwen3_config.h"

#include <simdjson.h>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

#include "core/error.h"

namespace hearth {

std::string fnv1a64_hex(const void* data, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

namespace {

using simdjson::dom::element;
using simdjson::dom::object;

std::string read_file(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) fail(path, ": cannot open: ", std::strerror(errno));
  std::string s;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f.get())) > 0) s.append(buf, n);
  if (std::ferror(f.get())) fail(path, ": read failed: ", std::strerror(errno));
  return s;
}

// A config's fields: absent and null both mean "use the default", as in transformers.
class Fields {
 public:
  Fields(object obj, const std::string& src) : obj_(obj), src_(src) {}

  bool present(const char* key) const {
    element e;
    return !obj_[key].get(e);
  }
  bool has(const char* key) const {
    element e;
    return !obj_[key].get(e) && !e.is_null();
  }
  element get(const char* key) const {
    auto r = obj_[key];
    return r.error() ? element() : r.value_unsafe();
  }

  std::optional<int64_t> int_opt(const char* key) const {
    if (!has(key)) return std::nullopt;
    int64_t v;
    if (get(key).get_int64().get(v)) fail(src_, ": field '", key, "' must be an integer");
    return v;
  }
  int positive_int(const char* key, std::optional<int64_t> dflt = std::nullopt) const {
    std::optional<int64_t> v = int_opt(key);
    if (!v) v = dflt;
    if (!v) fail(src_, ": required field '", key, "' is missing");
    if (*v <= 0 || *v > INT_MAX) fail(src_, ": field '", key, "' must be positive, got ", *v);
    return int(*v);
  }
  std::optional<double> num_opt(const char* key) const {
    if (!has(key)) return std::nullopt;
    double v;
    if (get(key).get_double().get(v)) fail(src_, ": field '", key, "' must be a number");
    return v;
  }
  std::optional<bool> bool_opt(const char* key) const {
    if (!has(key)) return std::nullopt;
    bool v;
    if (get(key).get_bool().get(v)) fail(src_, ": field '", key, "' must be true or false");
    return v;
  }
  std::optional<std::string> str_opt(const char* key) const {
    if (!has(key)) return std::nullopt;
    std::string_view v;
    if (get(key).get_string().get(v)) fail(src_, ": field '", key, "' must be a string");
    return std::string(v);
  }
  // A token id field that may hold one id or a list of ids.
  std::vector<int32_t> ids(const char* key) const {
    std::vector<int32_t> out;
    if (!has(key)) return out;
    element e = get(key);
    auto one = [&](element x) {
      int64_t v;
      if (x.get_int64().get(v) || v < 0 || v > INT32_MAX)
        fail(src_, ": field '", key, "' must be a token id or a list of token ids");
      out.push_back(int32_t(v));
    };
    simdjson::dom::array arr;
    if (!e.get_array().get(arr)) {
      for (element x : arr) one(x);
    } else {
      one(e);
    }
    return out;
  }

 private:
  object obj_;
  const std::string& src_;
};

object parse_object(simdjson::dom::parser& parser, const simdjson::padded_string& json,
                    const std::string& src) {
  element doc;
  auto err = parser.parse(json).get(doc);
  if (err) fail(src, ": invalid JSON: ", simdjson::error_message(err));
  object obj;
  if (doc.get_object().get(obj)) fail(src, ": top level is not a JSON object");
  return obj;
}

// rope_scaling (transformers 4.x) and rope_parameters (5.x) may spell out the default rope, which
// is what hearth implements; any other rope type changes the frequencies.
void check_rope_block(const Fields& f, const char* key, const std::string& src) {
  if (!f.has(key)) return;
  element e = f.get(key);
  object o;
  if (e.get_object().get(o)) fail(src, ": field '", key, "' must be an object or null");
  std::string_view type = "default";
  element t;
  if (!o["rope_type"].get(t) || !o["type"].get(t)) {
    if (t.get_string().get(type)) fail(src, ": field '", key, "': rope_type must be a string");
  }
  if (type != "default")
    fail(src, ": field '", key, "' asks for rope type '", type,
         "'; only the default rope (no scaling) is supported");
}

// The Qwen3-MoE fields (transformers' Qwen3MoeConfig, with its defaults where it has them).
void read_moe_fields(const Fields& f, const std::string& src, Qwen3Config& c) {
  if (f.int_opt("num_experts").value_or(1) == 0)
    fail(src, ": num_experts is 0 but model_type is \"qwen3_moe\": its sparse layers need experts");
  c.num_experts = f.positive_int("num_experts");
  c.num_experts_per_tok = f.positive_int("num_experts_per_tok");
  if (c.num_experts_per_tok > c.num_experts)
    fail(src, ": num_experts_per_tok (", c.num_experts_per_tok, ") is more than num_experts (",
         c.num_experts, ")");
  c.moe_intermediate_size = f.positive_int("moe_intermediate_size");
  c.norm_topk_prob = f.bool_opt("norm_topk_prob").value_or(false);
  c.decoder_sparse_step = f.positive_int("decoder_sparse_step", 1);
  for (const char* shared : {"shared_expert_intermediate_size", "num_shared_experts"})
    if (f.int_opt(shared).value_or(0) > 0)
      fail(src, ": field '", shared, "' asks for shared experts, which Qwen3-MoE does not have ",
           "and hearth does not implement");
  if (f.has("mlp_only_layers")) {
    simdjson::dom::array arr;
    if (f.get("mlp_only_layers").get_array().get(arr))
      fail(src, ": field 'mlp_only_layers' must be a list of layer indices");
    for (element x : arr) {
      int64_t v;
      if (x.get_int64().get(v) || v < 0 || v >= c.num_hidden_layers)
        fail(src, ": mlp_only_layers holds ", simdjson::minify(x), "; layers are 0 to ",
             c.num_hidden_layers - 1);
      c.mlp_only_layers.push_back(int(v));
    }
  }
}

// What the Qwen3 graph does not have, refused by field: rope scaling, sliding windows, other
// activations, attention biases.
void refuse_unsupported(const Fields& f, const std::string& src) {
  check_rope_block(f, "rope_scaling", src);
  check_rope_block(f, "rope_parameters", src);
  if (f.bool_opt("use_sliding_window").value_or(false))
    fail(src, ": use_sliding_window is true; sliding-window attention is not supported");
  if (f.has("layer_types")) {
    simdjson::dom::array lt;
    if (f.get("layer_types").get_array().get(lt)) fail(src, ": field 'layer_types' must be a list");
    for (element x : lt) {
      std::string_view s;
      if (x.get_string().get(s) || s != "full_attention")
        fail(src, ": layer_types holds ", simdjson::minify(x),
             "; only \"full_attention\" layers are supported");
    }
  }
  std::string act = f.str_opt("hidden_act").value_or("silu");
  if (act != "silu") fail(src, ": hidden_act is \"", act, "\"; only \"silu\" is supported");
  if (f.bool_opt("attention_bias").value_or(false))
    fail(src, ": attention_bias is true; attention biases are not supported");
}

// Sizes, heads and vocabulary.
void read_shape(const Fields& f, const std::string& src, Qwen3Config& c) {
  c.hidden_size = f.positive_int("hidden_size");
  c.intermediate_size = f.positive_int("intermediate_size");
  c.num_hidden_layers = f.positive_int("num_hidden_layers");
  c.num_attention_heads = f.positive_int("num_attention_heads");
  // transformers reads an explicit null as plain multi-head attention; an absent field is an
  // error, since its dataclass default (32) would never fit a real checkpoint by chance.
  if (f.present("num_key_value_heads") && !f.has("num_key_value_heads"))
    c.num_key_value_heads = c.num_attention_heads;
  else
    c.num_key_value_heads = f.positive_int("num_key_value_heads");
  // transformers' Qwen3Config defaults head_dim to 128, not hidden_size / heads.
  c.head_dim = f.positive_int("head_dim", 128);
  c.vocab_size = f.positive_int("vocab_size");
  c.max_position_embeddings = f.positive_int("max_position_embeddings", 32768);

  if (c.num_attention_heads % c.num_key_value_heads != 0)
    fail(src, ": num_attention_heads (", c.num_attention_heads,
         ") is not a multiple of num_key_value_heads (", c.num_key_value_heads, ")");
  if (c.head_dim % 2 != 0)
    fail(src, ": head_dim (", c.head_dim, ") must be even, rope rotates pairs of dimensions");
}

// RoPE's theta, the norms' epsilon, the dtype and the special token ids.
void read_numbers(const Fields& f, const std::string& src, Qwen3Config& c) {
  std::optional<double> theta = f.num_opt("rope_theta");
  if (!theta && f.has("rope_parameters")) {
    object rp;
    if (!f.get("rope_parameters").get_object().get(rp))
      theta = Fields(rp, src).num_opt("rope_theta");
  }
  c.rope_theta = theta.value_or(10000.0);
  if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta))
    fail(src, ": rope_theta must be a positive number, got ", c.rope_theta);
  c.rms_norm_eps = f.num_opt("rms_norm_eps").value_or(1e-6);
  if (!(c.rms_norm_eps > 0) || !std::isfinite(c.rms_norm_eps))
    fail(src, ": rms_norm_eps must be a positive number, got ", c.rms_norm_eps);
  c.tie_word_embeddings = f.bool_opt("tie_word_embeddings").value_or(false);
  // transformers 5 renamed torch_dtype to dtype.
  c.torch_dtype = f.str_opt("torch_dtype").value_or(f.str_opt("dtype").value_or(""));
  c.eos_token_ids = f.ids("eos_token_id");
  std::vector<int32_t> bos = f.ids("bos_token_id");
  if (bos.size() > 1) fail(src, ": field 'bos_token_id' must be a single token id");
  if (!bos.empty()) c.bos_token_id = bos[0];
}

}  // namespace

bool Qwen3Config::sparse_layer(int i) const {
  if (num_experts <= 0) return false;
  for (int l : mlp_only_layers)
    if (l == i) return false;
  return (i + 1) % decoder_sparse_step == 0;
}

Qwen3Config parse_qwen3_config(const std::string& text, const std::string& src) {
  simdjson::dom::parser parser;
  simdjson::padded_string json(text);
  Fields f(parse_object(parser, json, src), src);
  Qwen3Config c;
  c.source = src;
  c.config_hash = fnv1a64_hex(text.data(), text.size());

  std::optional<std::string> mt = f.str_opt("model_type");
  if (!mt) fail(src, ": field 'model_type' is missing (expected \"qwen3\" or \"qwen3_moe\")");
  if (*mt != "qwen3" && *mt != "qwen3_moe")
    fail(src, ": model_type is \"", *mt, "\"; only \"qwen3\" and \"qwen3_moe\" are supported");

  refuse_unsupported(f, src);
  read_shape(f, src, c);
  read_numbers(f, src, c);
  if (*mt == "qwen3_moe") read_moe_fields(f, src, c);
  c.random_weights = f.has("hearth_standin");
  if (f.has("quantization_config")) {
    c.has_quantization_config = true;
    c.quantization_config_json = simdjson::minify(f.get("quantization_config"));
  }
  return c;
}

Qwen3Config load_qwen3_config(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  return parse_qwen3_config(read_file(path), path);
}

GenerationConfig parse_generation_config(const std::string& text, const std::string& src,
                                         const Qwen3Config& config) {
  simdjson::dom::parser parser;
  simdjson::padded_string json(text);
  Fields f(parse_object(parser, json, src), src);
  GenerationConfig g;
  g.eos_token_ids = f.ids("eos_token_id");
  if (g.eos_token_ids.empty()) g.eos_token_ids = config.eos_token_ids;
  std::vector<int32_t> bos = f.ids("bos_token_id");
  if (bos.size() > 1) fail(src, ": field 'bos_token_id' must be a single token id");
  if (!bos.empty())
    g.bos_token_id = bos[0];
  else
    g.bos_token_id = config.bos_token_id;
  g.temperature = f.num_opt("temperature");
  if (auto k = f.int_opt("top_k")) {
    if (*k < 0 || *k > INT_MAX) fail(src, ": field 'top_k' must be a non-negative integer");
    g.top_k = int(*k);
  }
  g.top_p = f.num_opt("top_p");
  g.min_p = f.num_opt("min_p");
  g.repetition_penalty = f.num_opt("repetition_penalty");
  g.do_sample = f.bool_opt("do_sample");
  return g;
}

GenerationConfig load_generation_config(const std::string& dir, const Qwen3Config& config) {
  const std::filesystem::path path = std::filesystem::path(dir) / "generation_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    GenerationConfig g;
    g.eos_token_ids = config.eos_token_ids;
    g.bos_token_id = config.bos_token_id;
    return g;
  }
  return parse_generation_config(read_file(path.string()), path.string(), config);
}

}  // namespace hearth
