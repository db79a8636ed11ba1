// Feeds the input, split at NUL bytes, as tokenizer.json text, tokenizer_config.json text and a
// text to encode to Tokenizer::from_json; a tokenizer it accepts then encodes that text (and a
// fixed one), decodes the ids both ways, and parses its chat template (not rendered: that is
// fuzz_jinja's job).
#include <cstdint>

#include "core/error.h"
#include "models/chat_template.h"
#include "models/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

using namespace hearth;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = fuzz::split_nul(data, size, 3);
  try {
    Tokenizer tok = Tokenizer::from_json(parts[0], parts[1]);
    const size_t n = tok.vocab_size();
    for (const std::string& text :
         {parts[2], std::string("Hello, world! 123 <|im_end|>\n\xc3\xa9")}) {
      std::vector<int32_t> ids = tok.encode(text);
      for (int32_t id : ids) FUZZ_CHECK(id >= 0);
      (void)tok.pretokenize(text);
      (void)tok.decode(ids, false);
      (void)tok.decode(ids, true);
      StreamDecoder sd(tok, false);
      std::string streamed;
      for (int32_t id : ids) streamed += sd.push(id);
      streamed += sd.flush();
      FUZZ_CHECK(streamed == tok.decode(ids, false));
    }
    for (int32_t id : {0, 1, 255, 256, int32_t(n) - 1, int32_t(n), 151643, INT32_MAX, -1}) {
      (void)tok.token_text(id);
      (void)tok.token_bytes(id);
      (void)tok.is_special(id);
    }
    (void)tok.eos_token();
    (void)tok.bos_token();
    if (!tok.chat_template().empty()) {
      try {
        ChatTemplate t(tok.chat_template(), tok.bos_token(), tok.eos_token());
      } catch (const Error& e) {
        fuzz::refused(e);
      }
    }
  } catch (const Error& e) {
    fuzz::refused(e);
  }
  return 0;
}
