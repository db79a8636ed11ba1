// Qwen3 tokenizer: byte-level BPE read from Hugging Face tokenizer.json, byte-exact with the
// `tokenizers` library (added tokens split first, NFC, regex pre-tokenizer, byte-level BPE).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace hearth {

namespace tok {
struct Model;  // defined in models/tokenizer_impl.h
}

class Tokenizer {
 public:
  // Reads DIR/tokenizer.json and, when present, DIR/tokenizer_config.json (chat template, eos/bos).
  // Ids must be below DIR/config.json's vocab_size (when it has one). Throws hearth::Error naming
  // the file and field on anything malformed or not implemented.
  static Tokenizer load(const std::string& dir);
  // Same from in-memory JSON; an empty config string means "no tokenizer_config.json";
  // vocab_size 0: ids up to 2^24.
  static Tokenizer from_json(const std::string& tokenizer_json,
                             const std::string& tokenizer_config_json, int64_t vocab_size = 0);

  // Token ids for `text`; added-token strings anywhere in the text become their ids, no special
  // tokens are added. Invalid UTF-8 in `text` is first replaced by U+FFFD (as from_utf8_lossy).
  // Safe to call from several threads at once.
  std::vector<int32_t> encode(std::string_view text) const;
  // The pieces BPE sees (added tokens are pieces of their own), before byte-level mapping.
  std::vector<std::string> pretokenize(std::string_view text) const;
  // Concatenates the bytes of all tokens, then decodes UTF-8 once; each maximal invalid subpart
  // becomes U+FFFD (Rust's String::from_utf8_lossy). Ids with no token are dropped.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const;

  int32_t token_id(std::string_view token) const;  // -1 if none; token in vocab spelling ("Ġhi")
  std::string token_text(int32_t id) const;        // vocab spelling; "" if no such id
  bool is_special(int32_t id) const;               // added token with special=true
  size_t vocab_size() const;                       // distinct ids with a token (vocab + added)
  const std::string& chat_template() const;        // "" if absent
  std::string eos_token() const;                   // "" if absent or null
  std::string bos_token() const;                   // "" if absent or null

  // Raw bytes of one token as decode would emit them before UTF-8 repair; "" if no such id.
  std::string_view token_bytes(int32_t id) const;

 private:
  explicit Tokenizer(std::shared_ptr<tok::Model> m) : m_(std::move(m)) {}
  // Shared so copies are cheap; the model is immutable apart from its internally locked cache.
  std::shared_ptr<tok::Model> m_;
};

// Incremental decode for generation: push ids one at a time and get the text that became complete
// UTF-8. Incomplete trailing UTF-8 is held back until a later token completes it or flush() emits
// it (with U+FFFD, as batch decode would). Concatenating all outputs and flush() equals
// Tokenizer::decode of all ids. Holds a (cheap, shared) copy of the tokenizer.
class StreamDecoder {
 public:
  StreamDecoder(const Tokenizer& tok, bool skip_special_tokens);
  std::string push(int32_t id);
  std::string flush();

 private:
  Tokenizer tok_;
  bool skip_special_;
  std::string pending_;  // bytes not yet emitted: at most one incomplete UTF-8 sequence
};

// Single-thread encode throughput of `text`, encoded `repeats` times, in MB/s (1e6 bytes).
double tokenizer_bench_mb_per_s(const Tokenizer& tok, const std::string& text, int repeats);

}  // namespace hearth
