// Feeds the input as little-endian int32 token ids (any value: negative, past the vocab, INT32_MAX)
// to the real Qwen3 tokenizer's decode (../shared/qwen3-tokenizer, loaded once), with
// skip_special_tokens from the first byte; streaming decode (StreamDecoder) must equal batch decode
// and the output must be valid UTF-8.
#include <utf8proc.h>

#include <cstdint>
#include <cstring>

#include "core/error.h"
#include "models/tokenizer.h"
#include "tests/fuzz/fuzz_tokenizer.h"

using namespace hearth;

using fuzz::qwen3_tokenizer;
using fuzz::valid_utf8;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)qwen3_tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Tokenizer& tok = qwen3_tokenizer();
  const bool skip = data[0] & 1;
  std::vector<int32_t> ids((size - 1) / 4);
  if (!ids.empty()) std::memcpy(ids.data(), data + 1, ids.size() * 4);
  try {
    const std::string text = tok.decode(ids, skip);
    FUZZ_CHECK(valid_utf8(text));
    StreamDecoder sd(tok, skip);
    std::string streamed;
    for (int32_t id : ids) {
      streamed += sd.push(id);
      (void)tok.token_text(id);
      (void)tok.token_bytes(id);
      (void)tok.is_special(id);
    }
    streamed += sd.flush();
    FUZZ_CHECK(streamed == text);
  } catch (const Error&) {
    FUZZ_CHECK(false);  // decode documents dropping unknown ids, not refusing them
  }
  return 0;
}
