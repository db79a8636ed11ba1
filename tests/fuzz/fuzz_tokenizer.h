// What the tokenizer targets share: the real Qwen3 tokenizer, loaded once, and a UTF-8 check.
#pragma once
#include <utf8proc.h>

#include <string>

#include "models/tokenizer.h"
#include "tests/fuzz/fuzz_util.h"

namespace hearth::fuzz {

inline const Tokenizer& qwen3_tokenizer() {
  static const Tokenizer tok = Tokenizer::load(HEARTH_SHARED_DIR "/qwen3-tokenizer");
  return tok;
}

inline bool valid_utf8(const std::string& s) {
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

}  // namespace hearth::fuzz
