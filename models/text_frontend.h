// Text at the boundary of a model: its own tokenizer and chat template, loaded together from the
// checkpoint folder, and the ids chat generation must stop on.
#pragma once
#include <string>
#include <vector>

#include "models/chat_template.h"
#include "models/tokenizer.h"

namespace hearth {

struct TextFrontEnd {
  Tokenizer tokenizer;
  ChatTemplate chat;
  int32_t think_open = -1, think_close = -1;  // <think>, </think> ids (-1 when absent)

  static TextFrontEnd load(const std::string& model_dir);
  // `ids` (usually generation_config's eos list) plus <|im_end|> and <|endoftext|>, deduplicated.
  std::vector<int32_t> stop_ids(std::vector<int32_t> ids) const;
};

}  // namespace hearth
