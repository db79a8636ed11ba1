#include "models/text_frontend.h"

#include <algorithm>

#include "core/error.h"

namespace hearth {

TextFrontEnd TextFrontEnd::load(const std::string& model_dir) {
  TextFrontEnd t{Tokenizer::load(model_dir), {}, -1, -1};
  if (t.tokenizer.chat_template().empty())
    fail(model_dir, "/tokenizer_config.json: no chat_template");
  t.chat =
      ChatTemplate(t.tokenizer.chat_template(), t.tokenizer.bos_token(), t.tokenizer.eos_token());
  t.think_open = t.tokenizer.token_id("<think>");
  t.think_close = t.tokenizer.token_id("</think>");
  return t;
}

std::vector<int32_t> TextFrontEnd::stop_ids(std::vector<int32_t> ids) const {
  for (const char* s : {"<|im_end|>", "<|endoftext|>"}) {
    int32_t id = tokenizer.token_id(s);
    if (id >= 0 && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
  return ids;
}

}  // namespace hearth
