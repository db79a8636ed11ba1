// One line of the batch text commands (`hearth tokenize|detokenize|template --jsonl`): a parsed
// JSON line in, its JSON answer out (without the newline). Bad fields throw hearth::Error naming
// them; the fuzz target tests/fuzz/fuzz_jsonl.cpp drives these same functions.
#pragma once
#include <string>

#include "models/json_value.h"
#include "models/text_frontend.h"

namespace hearth::cli {

// {"text": ...} -> [ids...]
std::string tokenize_line(const Tokenizer& tok, const Json& line);
// {"ids": [...], "skip_special_tokens": bool?} -> "text" (ids range-checked as 64-bit values)
std::string detokenize_line(const Tokenizer& tok, const Json& line);
// {"messages": [...], "add_generation_prompt": bool?, "enable_thinking": bool|null?,
//  "tools": [...]?, other template keywords...} -> {"text": ..., "ids": [...]}
std::string template_line(const TextFrontEnd& t, const Json& line);

}  // namespace hearth::cli
