// Feeds the input as little-endian int32 token ids (any value: negative, past the vocab, INT32_MAX)
// to the real Qwen3 tokenizer's decode (../shared/qwen3-tokenizer, loaded once), with
// skip_special_tokens from the first byte; streaming decode (StreamDecoder) must equal batch decode
// and the output must be valid UTF-8.
#include <utf8proc.h>

#include <cstdint>
#include <cstring>

#include "core/error.h"
#include "models/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

using namespace hearth;

namespace {

const Tokenizer& tokenizer() {
  static const Tokenizer tok = Tokenizer::load(HEARTH_SHARED_DIR "/qwen3-tokenizer");
  return tok;
}

bool valid_utf8(const std::string& s) {
  const auto* p = reinterpret_cast<const utf8proc_uint8_t*>(s.data());
  utf8proc_ssize_t i = 0, n = utf8proc_ssize_t(s.size());
  while (i < n) {
    utf8proc_int32_t c;
    utf8proc_ssize_t k = utf8proc_iterate(p + i, n - i, &c);
    if (k <= 0) return false;
    i += k;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)tokenizer();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const Tokenizer& tok = tokenizer();
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
