// Chat prompts from a Hugging Face chat template, rendered the way transformers'
// apply_chat_template(tokenize=False) does.
#pragma once
#include <optional>
#include <string>

#include "models/jinja.h"
#include "models/json_value.h"

namespace hearth {

struct ChatOptions {
  bool add_generation_prompt = true;
  std::optional<bool> enable_thinking;  // passed to the template only when set
  Json tools;                           // a list of tool schemas; null if none
  Json extra;                           // an object of further template keyword arguments, or null
};

class ChatTemplate {
 public:
  ChatTemplate() = default;
  // An empty bos/eos token leaves that variable undefined, as transformers does for a tokenizer
  // without one (Qwen3 has no bos_token). Throws hearth::Error on a template syntax error.
  ChatTemplate(const std::string& source, std::string bos_token, std::string eos_token);
  // From a parsed tokenizer_config.json: its chat_template (a string, or the "default" entry of a
  // list of {name, template}) and its bos_token/eos_token (strings or {"content": ...} objects).
  static ChatTemplate from_tokenizer_config(const Json& config);

  // `messages` is a list of message objects. The template sees messages, tools and documents
  // (None when not given, like transformers), add_generation_prompt, bos_token, eos_token,
  // enable_thinking when set, and every member of opt.extra.
  std::string render(const Json& messages, const ChatOptions& opt) const;

  const std::string& bos_token() const { return bos_; }
  const std::string& eos_token() const { return eos_; }

 private:
  jinja::Template template_;
  std::string bos_, eos_;
};

std::string apply_chat_template(const std::string& template_source, const Json& messages,
                                const ChatOptions& opt, const std::string& bos_token,
                                const std::string& eos_token);

}  // namespace hearth
