// Loading tokenizer.json / tokenizer_config.json and the public Tokenizer API. Only what Qwen-style
// byte-level BPE tokenizers use is accepted; anything else fails loudly rather than encoding
// differently from Hugging Face `tokenizers`.
#include "models/tokenizer.h"

#include <simdjson.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "models/tokenizer_impl.h"

namespace hearth {

using tok::Model;

namespace {

// GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the rest to U+0100 onward.
struct ByteMap {
  uint32_t to_cp[256];
  int16_t to_byte[512];
  ByteMap() {
    for (auto& b : to_byte) b = -1;
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      to_cp[b] = printable ? b : next++;
      to_byte[to_cp[b]] = int16_t(b);
    }
  }
};

// The bytes decode emits for a token: the ByteLevel decoder maps every character back to its byte,
// and keeps a token's UTF-8 as is when some character is not in the byte map (e.g. added tokens).
void append_token_bytes(std::string_view token, const ByteMap& bm, std::string& out) {
  size_t start = out.size(), i = 0;
  while (i < token.size()) {
    uint32_t cp = tok::utf8_next(token, i);
    if (cp >= 512 || bm.to_byte[cp] < 0) {
      out.resize(start);
      out.append(token);
      return;
    }
    out += char(bm.to_byte[cp]);
  }
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, ": cannot open");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

using simdjson::dom::element;

// Small accessors that turn simdjson errors into messages naming the file and field.
struct Json {
  const std::string& file;
  element get(element obj, const char* key, const std::string& path) const {
    element e;
    if (obj.is_object() && !obj.at_key(key).get(e)) return e;
    fail(file, ": missing field ", path, ".", key);
  }
  bool has(element obj, const char* key) const {
    element e;
    return obj.is_object() && !obj.at_key(key).get(e) && !e.is_null();
  }
  std::string str(element e, const std::string& path) const {
    std::string_view s;
    if (e.get(s)) fail(file, ": ", path, " must be a string");
    return std::string(s);
  }
  bool flag(element obj, const char* key, const std::string& path, bool dflt) const {
    if (!has(obj, key)) return dflt;
    bool b;
    if (obj[key].get(b)) fail(file, ": ", path, ".", key, " must be a boolean");
    return b;
  }
  int64_t integer(element e, const std::string& path) const {
    int64_t v;
    if (e.get(v)) fail(file, ": ", path, " must be an integer");
    return v;
  }
  std::string type(element obj, const std::string& path) const {
    return str(get(obj, "type", path), path + ".type");
  }
};

const char kGpt2Pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

void load_model(Model& m, element model, const Json& j, const ByteMap& bm) {
  std::string type = j.has(model, "type") ? j.type(model, "model") : "BPE";
  if (type != "BPE") fail(j.file, ": model.type is \"", type, "\"; only BPE is supported");
  if (j.has(model, "dropout")) {
    double d;
    if (model["dropout"].get(d) || d != 0.0) fail(j.file, ": model.dropout is not supported");
  }
  for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (j.has(model, k) && !j.str(model[k], std::string("model.") + k).empty()) {
      fail(j.file, ": model.", k, " is not supported");
    }
  }
  m.fuse_unk = j.flag(model, "fuse_unk", "model", false);
  m.ignore_merges = j.flag(model, "ignore_merges", "model", false);
  bool byte_fallback = j.flag(model, "byte_fallback", "model", false);

  simdjson::dom::object vocab;
  if (j.get(model, "vocab", "model").get(vocab)) fail(j.file, ": model.vocab must be an object");
  m.tokens.reserve(vocab.size() + 64, vocab.size() * 8);
  for (auto kv : vocab) {
    int64_t id;  // messages are built only on failure: this loop runs 150k times
    if (kv.value.get(id)) fail(j.file, ": model.vocab[\"", kv.key, "\"] must be an integer");
    if (id < 0 || id >= m.id_bound)
      fail(j.file, ": model.vocab[\"", kv.key, "\"] is ", id, ", outside [0, ", m.id_bound, ") (",
           m.id_bound_source, ")");
    m.tokens.set(int32_t(id), kv.key);
  }

  for (int b = 0; b < 256; ++b) {
    std::string ch;
    tok::utf8_append(bm.to_cp[b], ch);
    m.byte_id[b] = m.tokens.find(ch);
    if (m.byte_id[b] < 0 && byte_fallback) {
      fail(j.file, ": model.byte_fallback with bytes missing from the vocab is not supported");
    }
  }
  if (j.has(model, "unk_token")) {
    std::string unk = j.str(model["unk_token"], "model.unk_token");
    m.unk_id = m.tokens.find(unk);
    if (m.unk_id < 0) fail(j.file, ": model.unk_token \"", unk, "\" is not in vocab");
  }

  simdjson::dom::array merges;
  if (j.get(model, "merges", "model").get(merges)) fail(j.file, ": model.merges must be an array");
  m.merges.reserve(merges.size());
  int32_t rank = 0;
  auto id_of = [&](const std::string& t, int32_t r) {
    int32_t id = m.tokens.find(t);
    if (id < 0) fail(j.file, ": model.merges[", r, "]: token \"", t, "\" is not in the vocab");
    return id;
  };
  std::string a, b, ab;  // reused: this loop runs 150k times
  for (element e : merges) {
    std::string_view s;
    simdjson::dom::array pair;
    if (!e.get(s)) {  // "a b" (older files)
      size_t sp = s.find(' ');
      if (sp == std::string_view::npos || s.find(' ', sp + 1) != std::string_view::npos) {
        fail(j.file, ": model.merges[", rank, "] must be \"a b\"");
      }
      a.assign(s.substr(0, sp));
      b.assign(s.substr(sp + 1));
    } else if (!e.get(pair) && pair.size() == 2) {  // ["a", "b"]
      std::string_view sa, sb;
      if (pair.at(0).get(sa) || pair.at(1).get(sb)) {
        fail(j.file, ": model.merges[", rank, "] must hold two strings");
      }
      a.assign(sa);
      b.assign(sb);
    } else {
      fail(j.file, ": model.merges[", rank, "] must be a string or a pair of strings");
    }
    int32_t ia = id_of(a, rank), ib = id_of(b, rank);
    ab.assign(a).append(b);
    m.merges.set(ia, ib, rank, id_of(ab, rank));
    ++rank;
  }
}

void load_normalizer(Model& m, element root, const Json& j) {
  if (!j.has(root, "normalizer")) return;
  element n = root["normalizer"];
  std::string type = j.type(n, "normalizer");
  if (type == "NFC") {
    m.nfc = true;
  } else if (type == "Sequence") {
    simdjson::dom::array list;
    if (j.get(n, "normalizers", "normalizer").get(list)) {
      fail(j.file, ": normalizer.normalizers must be an array");
    }
    for (element e : list) {
      std::string t = j.type(e, "normalizer.normalizers[]");
      if (t != "NFC") fail(j.file, ": normalizer \"", t, "\" is not supported (only NFC)");
      m.nfc = true;
    }
  } else {
    fail(j.file, ": normalizer \"", type, "\" is not supported (only NFC or none)");
  }
}

void load_pre_tokenizer(Model& m, element root, const Json& j) {
  if (!j.has(root, "pre_tokenizer")) fail(j.file, ": pre_tokenizer is required (ByteLevel)");
  element pt = root["pre_tokenizer"];
  std::vector<element> steps;
  if (j.type(pt, "pre_tokenizer") == "Sequence") {
    simdjson::dom::array list;
    if (j.get(pt, "pretokenizers", "pre_tokenizer").get(list)) {
      fail(j.file, ": pre_tokenizer.pretokenizers must be an array");
    }
    for (element e : list) steps.push_back(e);
  } else {
    steps.push_back(pt);
  }
  // Supported: any number of Isolated regex splits, then ByteLevel (the Qwen and GPT-2 layouts).
  for (size_t i = 0; i < steps.size(); ++i) {
    std::string where = "pre_tokenizer[" + std::to_string(i) + "]";
    std::string type = j.type(steps[i], where);
    if (type == "Split") {
      element pat = j.get(steps[i], "pattern", where);
      std::string regex;
      if (j.has(pat, "Regex")) {
        regex = j.str(pat["Regex"], where + ".pattern.Regex");
      } else if (j.has(pat, "String")) {
        regex = "\\Q" + j.str(pat["String"], where + ".pattern.String") + "\\E";
      } else {
        fail(j.file, ": ", where, ".pattern must have Regex or String");
      }
      std::string behavior = j.str(j.get(steps[i], "behavior", where), where + ".behavior");
      if (behavior != "Isolated") {
        fail(j.file, ": ", where, ".behavior \"", behavior, "\" is not supported (only Isolated)");
      }
      if (j.flag(steps[i], "invert", where, false))
        fail(j.file, ": ", where, ".invert is not supported");
      m.splits.emplace_back(regex, j.file + ": " + where + ".pattern");
    } else if (type == "ByteLevel") {
      if (i + 1 != steps.size()) fail(j.file, ": ", where, ": ByteLevel must be the last step");
      if (j.flag(steps[i], "add_prefix_space", where, false)) {
        fail(j.file, ": ", where, ".add_prefix_space=true is not supported");
      }
      if (j.flag(steps[i], "use_regex", where, true)) {
        m.splits.emplace_back(kGpt2Pattern, j.file + ": " + where + " (GPT-2 regex)");
      }
      return;
    } else {
      fail(j.file, ": pre-tokenizer \"", type, "\" is not supported (only Split and ByteLevel)");
    }
  }
  fail(j.file, ": pre_tokenizer must end with ByteLevel");
}

void load_added_tokens(Model& m, element root, const Json& j) {
  if (!j.has(root, "added_tokens")) return;
  simdjson::dom::array list;
  if (root["added_tokens"].get(list)) fail(j.file, ": added_tokens must be an array");
  size_t k = 0;
  for (element e : list) {
    std::string where = "added_tokens[" + std::to_string(k++) + "]";
    tok::AddedToken t;
    int64_t id = j.integer(j.get(e, "id", where), where + ".id");
    if (id < 0 || id >= m.id_bound)
      fail(j.file, ": ", where, ".id is ", id, ", outside [0, ", m.id_bound, ") (",
           m.id_bound_source, ")");
    t.id = int32_t(id);
    t.content = j.str(j.get(e, "content", where), where + ".content");
    t.single_word = j.flag(e, "single_word", where, false);
    t.lstrip = j.flag(e, "lstrip", where, false);
    t.rstrip = j.flag(e, "rstrip", where, false);
    t.normalized = j.flag(e, "normalized", where, false);
    t.special = j.flag(e, "special", where, false);
    // Added tokens take precedence over the model vocab in both directions, as in `tokenizers`.
    m.tokens.set(t.id, t.content);
    m.special.resize(m.tokens.id_limit(), 0);
    m.special[size_t(t.id)] = t.special;
    if (t.normalized && m.nfc) {
      std::string buf;
      std::string match(tok::nfc(t.content, buf));
      m.added_normalized.add(t, match);
    } else if (t.normalized) {
      m.added_normalized.add(t, t.content);
    } else {
      m.added_raw.add(t, t.content);
    }
  }
}

void check_decoder(element root, const Json& j) {
  if (!j.has(root, "decoder")) fail(j.file, ": decoder is required (ByteLevel)");
  std::string type = j.type(root["decoder"], "decoder");
  if (type != "ByteLevel")
    fail(j.file, ": decoder \"", type, "\" is not supported (only ByteLevel)");
}

// eos_token / bos_token: a string, an AddedToken-like object with "content", or null.
std::string config_token(element cfg, const char* key, const Json& j) {
  if (!j.has(cfg, key)) return "";
  element e = cfg[key];
  if (e.is_string()) return j.str(e, key);
  return j.str(j.get(e, "content", key), std::string(key) + ".content");
}

void load_config(Model& m, const std::string& text, const std::string& file) {
  if (text.empty()) return;
  Json j{file};
  simdjson::dom::parser parser;
  element cfg;
  simdjson::padded_string padded(text);
  if (auto err = parser.parse(padded).get(cfg))
    fail(file, ": invalid JSON: ", simdjson::error_message(err));
  if (!cfg.is_object()) fail(file, ": must be a JSON object");
  if (j.has(cfg, "chat_template")) {
    element t = cfg["chat_template"];
    if (t.is_string()) {
      m.chat_template = j.str(t, "chat_template");
    } else if (t.is_array()) {  // [{name, template}, ...]: the one named "default"
      for (element e : t.get_array()) {
        if (j.str(j.get(e, "name", "chat_template[]"), "chat_template[].name") == "default") {
          m.chat_template =
              j.str(j.get(e, "template", "chat_template[]"), "chat_template[].template");
        }
      }
    } else {
      fail(file, ": chat_template must be a string or a list of {name, template}");
    }
  }
  m.eos_token = config_token(cfg, "eos_token", j);
  m.bos_token = config_token(cfg, "bos_token", j);
}

std::shared_ptr<Model> build(const std::string& tokenizer_json, const std::string& config_json,
                             const std::string& tj_name, const std::string& cfg_name,
                             int64_t vocab_size, const std::string& vocab_source) {
  static_assert(sizeof(int32_t) == 4, "ids are 32-bit");
  const ByteMap bm;
  auto m = std::make_shared<Model>();
  if (vocab_size > 0) {
    m->id_bound = vocab_size;
    m->id_bound_source = vocab_source;
  }
  Json j{tj_name};
  simdjson::dom::parser parser;
  element root;
  simdjson::padded_string padded(tokenizer_json);
  if (auto err = parser.parse(padded).get(root)) {
    fail(tj_name, ": invalid JSON: ", simdjson::error_message(err));
  }
  if (!root.is_object()) fail(tj_name, ": must be a JSON object");
  load_model(*m, j.get(root, "model", "<root>"), j, bm);
  load_normalizer(*m, root, j);
  load_pre_tokenizer(*m, root, j);
  load_added_tokens(*m, root, j);
  check_decoder(root, j);
  // Truncation would change what encode returns; padding and post_processor only matter for
  // batches and for adding special tokens, neither of which encode does.
  if (j.has(root, "truncation")) fail(tj_name, ": truncation is not supported");
  const size_t n_ids = m->tokens.id_limit();
  m->special.resize(n_ids, 0);
  m->bytes_off.resize(n_ids + 1);
  for (size_t id = 0; id < n_ids; ++id) {
    m->bytes_off[id] = uint32_t(m->bytes.size());
    append_token_bytes(m->tokens.text(int32_t(id)), bm, m->bytes);
  }
  m->bytes_off[n_ids] = uint32_t(m->bytes.size());
  load_config(*m, config_json, cfg_name);
  return m;
}

// Per-call state for encode and pretokenize; nothing here is shared between threads.
struct Walker {
  const Model& m;
  pcre2_match_data* md;
  std::vector<tok::Segment> segs, segs2;
  std::vector<std::pair<uint32_t, uint32_t>> pieces, pieces2;
  std::string nfc_buf;

  explicit Walker(const Model& model) : m(model), md(pcre2_match_data_create(1, nullptr)) {
    if (!md) fail("tokenizer: out of memory");
  }
  ~Walker() { pcre2_match_data_free(md); }
  Walker(const Walker&) = delete;
  Walker& operator=(const Walker&) = delete;

  // Calls f(piece, added_id) for every piece in order; added_id is -1 for pieces BPE must encode.
  template <class F>
  void run(std::string_view text, F&& f) {
    segs.clear();
    m.added_raw.split(text, 0, uint32_t(text.size()), segs);
    for (const tok::Segment& seg : segs) {
      std::string_view part = text.substr(seg.begin, seg.end - seg.begin);
      if (seg.id >= 0) {
        f(part, seg.id);
        continue;
      }
      std::string_view norm = m.nfc ? tok::nfc(part, nfc_buf) : part;
      if (m.added_normalized.empty()) {
        pretokenize(norm, 0, norm.size(), f);
        continue;
      }
      segs2.clear();
      m.added_normalized.split(norm, 0, uint32_t(norm.size()), segs2);
      for (const tok::Segment& s2 : segs2) {
        if (s2.id >= 0) {
          f(norm.substr(s2.begin, s2.end - s2.begin), s2.id);
        } else {
          pretokenize(norm, s2.begin, s2.end, f);
        }
      }
    }
  }

  template <class F>
  void pretokenize(std::string_view s, size_t begin, size_t end, F&& f) {
    if (begin == end) return;
    if (m.splits.empty()) {
      f(s.substr(begin, end - begin), -1);
      return;
    }
    pieces.clear();
    m.splits[0].split(s, begin, end, md, pieces);
    for (size_t k = 1; k < m.splits.size(); ++k) {
      pieces2.clear();
      for (auto& p : pieces) m.splits[k].split(s, p.first, p.second, md, pieces2);
      pieces.swap(pieces2);
    }
    for (auto& p : pieces) f(s.substr(p.first, p.second - p.first), -1);
  }
};

// PCRE2 and NFC need valid UTF-8 (as Rust strings are), and offsets are 32-bit.
std::string_view checked_input(std::string_view text, std::string& repaired) {
  if (text.size() >= UINT32_MAX) fail("tokenizer: input of ", text.size(), " bytes is too large");
  if (tok::utf8_valid(text)) return text;
  tok::utf8_lossy_append(text, repaired, true);
  return repaired;
}

}  // namespace

Tokenizer Tokenizer::load(const std::string& dir) {
  std::string tj = dir + "/tokenizer.json", tc = dir + "/tokenizer_config.json";
  std::string cfg;
  if (std::ifstream(tc).good()) cfg = read_file(tc);
  // The model's vocab_size bounds the ids, when the folder has a config.json that says it.
  const std::string config = dir + "/config.json";
  int64_t vocab = 0;
  if (std::ifstream(config).good()) {
    simdjson::dom::parser parser;
    simdjson::padded_string text(read_file(config));
    simdjson::dom::element root;
    if (!parser.parse(text).get(root) && root.is_object() && root["vocab_size"].get(vocab))
      vocab = 0;  // absent or not an integer: config.json's own checks say so
  }
  return Tokenizer(build(read_file(tj), cfg, tj, tc, vocab, config + ": vocab_size"));
}

Tokenizer Tokenizer::from_json(const std::string& tokenizer_json,
                               const std::string& tokenizer_config_json, int64_t vocab_size) {
  return Tokenizer(build(tokenizer_json, tokenizer_config_json, "tokenizer.json",
                         "tokenizer_config.json", vocab_size, "vocab_size"));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::string repaired;
  text = checked_input(text, repaired);
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  Walker w(*m_);
  tok::BpeScratch scratch;
  w.run(text, [&](std::string_view piece, int32_t id) {
    if (id >= 0) {
      out.push_back(id);
    } else {
      m_->bpe(piece, out, scratch);
    }
  });
  return out;
}

std::vector<std::string> Tokenizer::pretokenize(std::string_view text) const {
  std::string repaired;
  text = checked_input(text, repaired);
  std::vector<std::string> out;
  Walker w(*m_);
  w.run(text, [&](std::string_view piece, int32_t) { out.emplace_back(piece); });
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::string bytes;
  for (int32_t id : ids) {
    if (skip_special_tokens && is_special(id)) continue;
    bytes += token_bytes(id);
  }
  std::string out;
  out.reserve(bytes.size());
  tok::utf8_lossy_append(bytes, out, true);
  return out;
}

int32_t Tokenizer::token_id(std::string_view token) const {
  return m_->tokens.find(token);
}

std::string Tokenizer::token_text(int32_t id) const {
  return std::string(m_->tokens.text(id));
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || size_t(id) + 1 >= m_->bytes_off.size()) return {};
  return std::string_view(m_->bytes).substr(
      m_->bytes_off[size_t(id)], m_->bytes_off[size_t(id) + 1] - m_->bytes_off[size_t(id)]);
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && size_t(id) < m_->special.size() && m_->special[size_t(id)];
}

size_t Tokenizer::vocab_size() const {
  return m_->tokens.count();
}
const std::string& Tokenizer::chat_template() const {
  return m_->chat_template;
}
std::string Tokenizer::eos_token() const {
  return m_->eos_token;
}
std::string Tokenizer::bos_token() const {
  return m_->bos_token;
}

StreamDecoder::StreamDecoder(const Tokenizer& tok, bool skip_special_tokens)
    : tok_(tok), skip_special_(skip_special_tokens) {}

std::string StreamDecoder::push(int32_t id) {
  if (skip_special_ && tok_.is_special(id)) return "";
  pending_ += tok_.token_bytes(id);
  std::string out;
  size_t used = tok::utf8_lossy_append(pending_, out, false);
  pending_.erase(0, used);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out;
  tok::utf8_lossy_append(pending_, out, true);
  pending_.clear();
  return out;
}

double tokenizer_bench_mb_per_s(const Tokenizer& tok, const std::string& text, int repeats) {
  if (repeats < 1) repeats = 1;
  size_t sink = 0;
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < repeats; ++r) sink += tok.encode(text).size();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (sink == size_t(-1)) return 0;  // keeps the encodes from being optimised away
  return s > 0 ? double(text.size()) * repeats / s / 1e6 : 0.0;
}

}  // namespace hearth
