#include "tools/jsonl_lines.h"

#include <climits>
#include <vector>

#include "core/error.h"
#include "core/json_writer.h"

namespace hearth::cli {

namespace {

const Json& member(const Json& v, const char* key) {
  const Json* m = v.is_object() ? v.find(key) : nullptr;
  if (!m) fail("missing \"", key, "\"");
  return *m;
}

}  // namespace

std::string tokenize_line(const Tokenizer& tok, const Json& v) {
  const Json& text = member(v, "text");
  if (!text.is_string()) fail("\"text\" must be a string");
  JsonWriter w;
  w.array(tok.encode(text.as_string()));
  return w.str();
}

std::string detokenize_line(const Tokenizer& tok, const Json& v) {
  const Json& ids = member(v, "ids");
  if (!ids.is_array()) fail("\"ids\" must be an array");
  std::vector<int32_t> list;
  for (const Json& id : ids.as_array()) {
    if (!id.is_int()) fail("\"ids\" must hold integers");
    // Checked as the 64-bit values JSON gives, so 2^32 + 1 is refused rather than read as 1.
    if (id.as_int() < 0 || id.as_int() > INT32_MAX)
      fail("\"ids\"[", list.size(), "] is ", id.as_int(), ", not a token id");
    list.push_back(int32_t(id.as_int()));
  }
  bool skip = false;
  if (const Json* s = v.find("skip_special_tokens")) {
    if (!s->is_bool()) fail("\"skip_special_tokens\" must be true or false");
    skip = s->as_bool();
  }
  return json_quote(tok.decode(list, skip));
}

std::string template_line(const TextFrontEnd& t, const Json& v) {
  if (!v.is_object()) fail("each line must be a JSON object");
  const Json& messages = member(v, "messages");
  if (!messages.is_array()) fail("\"messages\" must be an array");
  ChatOptions opt;
  Json extra = Json::object();
  for (const auto& [k, val] : v.as_object()) {
    if (k == "messages") continue;
    if (k == "add_generation_prompt") {
      if (!val.is_bool()) fail("\"add_generation_prompt\" must be true or false");
      opt.add_generation_prompt = val.as_bool();
    } else if (k == "enable_thinking") {
      if (val.is_bool())
        opt.enable_thinking = val.as_bool();
      else if (!val.is_null())
        fail("\"enable_thinking\" must be true, false or null");
    } else if (k == "tools") {
      opt.tools = val;
    } else {
      extra.set(k, val);
    }
  }
  opt.extra = extra;
  const std::string text = t.chat.render(messages, opt);
  JsonWriter w;
  w.begin_object();
  w.field("text", text);
  w.key("ids").array(t.tokenizer.encode(text));
  w.end_object();
  return w.str();
}

}  // namespace hearth::cli
