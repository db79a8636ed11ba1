#include "models/chat_template.h"

#include "core/error.h"

namespace hearth {

namespace {

std::string token_text(const Json* tok) {
  if (!tok || tok->is_null()) return "";
  if (tok->is_string()) return tok->as_string();
  if (tok->is_object() && tok->contains("content")) return tok->at("content").as_string();
  fail("tokenizer_config.json: a special token must be a string or an object with \"content\"");
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source, std::string bos_token, std::string eos_token)
    : template_(jinja::Template::parse(source)),
      bos_(std::move(bos_token)),
      eos_(std::move(eos_token)) {}

ChatTemplate ChatTemplate::from_tokenizer_config(const Json& config) {
  const Json* tmpl = config.find("chat_template");
  if (!tmpl || tmpl->is_null()) fail("tokenizer_config.json: no chat_template");
  std::string source;
  if (tmpl->is_string()) {
    source = tmpl->as_string();
  } else if (tmpl->is_array()) {
    for (const Json& entry : tmpl->as_array())
      if (entry.is_object() && entry.contains("name") && entry.at("name") == Json("default"))
        source = entry.at("template").as_string();
    if (source.empty()) fail("tokenizer_config.json: chat_template has no \"default\" entry");
  } else {
    fail("tokenizer_config.json: chat_template must be a string or a list");
  }
  return ChatTemplate(source, token_text(config.find("bos_token")),
                      token_text(config.find("eos_token")));
}

std::string ChatTemplate::render(const Json& messages, const ChatOptions& opt) const {
  if (!messages.is_array()) fail("chat template: messages must be a list");
  Json ctx = Json::object();
  ctx.set("messages", messages);
  ctx.set("tools", opt.tools);
  ctx.set("documents", Json());
  ctx.set("add_generation_prompt", opt.add_generation_prompt);
  if (!bos_.empty()) ctx.set("bos_token", bos_);
  if (!eos_.empty()) ctx.set("eos_token", eos_);
  if (opt.enable_thinking) ctx.set("enable_thinking", *opt.enable_thinking);
  if (!opt.extra.is_null()) {
    if (!opt.extra.is_object()) fail("chat template: extra arguments must be an object");
    for (const auto& kv : opt.extra.as_object()) {
      // Python would reject these as duplicate keyword arguments.
      if (kv.first == "messages" || kv.first == "tools" || kv.first == "documents" ||
          kv.first == "add_generation_prompt" ||
          (kv.first == "enable_thinking" && opt.enable_thinking))
        fail("chat template: argument '", kv.first, "' is given twice");
      ctx.set(kv.first, kv.second);
    }
  }
  return template_.render(ctx);
}

std::string apply_chat_template(const std::string& template_source, const Json& messages,
                                const ChatOptions& opt, const std::string& bos_token,
                                const std::string& eos_token) {
  return ChatTemplate(template_source, bos_token, eos_token).render(messages, opt);
}

}  // namespace hearth
