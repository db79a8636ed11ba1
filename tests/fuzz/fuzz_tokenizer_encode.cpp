// Feeds the input as text to the real Qwen3 tokenizer (../shared/qwen3-tokenizer, loaded once):
// encode, pretokenize, then decode of the ids. For valid UTF-8 the round trip must give back the
// pre-tokenizer's pieces and, without added tokens, the NFC of the input (fixtures/README.md:
// decode(encode(text)) == NFC(text)); streaming decode must equal batch decode.
#include <utf8proc.h>

#include <cstdint>
#include <cstdlib>

#include "core/error.h"
#include "models/tokenizer.h"
#include "tests/fuzz/fuzz_tokenizer.h"

using namespace hearth;

namespace {

using fuzz::qwen3_tokenizer;
using fuzz::valid_utf8;

std::string nfc(const std::string& s) {
  utf8proc_uint8_t* out = utf8proc_NFC(reinterpret_cast<const utf8proc_uint8_t*>(s.c_str()));
  FUZZ_CHECK(out != nullptr);
  std::string r(reinterpret_cast<char*>(out));
  std::free(out);
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)qwen3_tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Tokenizer& tok = qwen3_tokenizer();
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    std::vector<int32_t> ids = tok.encode(text);
    const std::vector<std::string> pieces = tok.pretokenize(text);
    const std::string back = tok.decode(ids, false);
    for (int32_t id : ids) FUZZ_CHECK(!tok.token_text(id).empty());
    if (valid_utf8(text)) {
      // BPE must neither lose nor invent bytes of any piece.
      std::string joined;
      for (const std::string& p : pieces) joined += p;
      FUZZ_CHECK(back == joined);
      // NFC runs between added tokens, not across them, so the whole text's NFC is the oracle
      // only without '<' (every added token starts with it). NUL ends utf8proc_NFC's C string.
      if (text.find('<') == std::string::npos && text.find('\0') == std::string::npos)
        FUZZ_CHECK(back == nfc(text));
    }
    StreamDecoder sd(tok, false);
    std::string streamed;
    for (int32_t id : ids) streamed += sd.push(id);
    streamed += sd.flush();
    FUZZ_CHECK(streamed == back);
  } catch (const Error&) {
    // The tokenizer repairs any bytes; refusing text is itself a finding.
    FUZZ_CHECK(false);
  }
  return 0;
}
