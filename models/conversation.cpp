#include "models/conversation.h"

namespace hearth {

namespace {

Json message(const std::string& role, const std::string& content) {
  return Json(Json::Object{{"role", Json(role)}, {"content", Json(content)}});
}

bool has_role(const Json& m, const char* role) {
  if (!m.is_object()) return false;
  const Json* r = m.find("role");
  return r && r->is_string() && r->as_string() == role;
}

}  // namespace

Conversation::Conversation(const TextFrontEnd& text, std::optional<std::string> system_prompt)
    : text_(text), system_(std::move(system_prompt)) {
  reset();
}

void Conversation::reset() {
  messages_ = Json::array();
  if (system_) messages_.push_back(message("system", *system_));
  ids_.clear();
}

void Conversation::set_messages(Json messages) {
  if (!messages.is_array()) fail("a conversation is a JSON array of messages");
  for (const Json& m : messages.as_array()) {
    const Json* role = m.is_object() ? m.find("role") : nullptr;
    const Json* content = m.is_object() ? m.find("content") : nullptr;
    if (!role || !role->is_string() || !content || !content->is_string())
      fail("every message needs a string \"role\" and \"content\"");
  }
  messages_ = std::move(messages);
  ids_.clear();
}

void Conversation::add(const std::string& role, const std::string& content) {
  messages_.push_back(message(role, content));
  ids_.clear();
}

size_t Conversation::first_turn() const {
  const auto& m = messages_.as_array();
  return !m.empty() && has_role(m[0], "system") ? 1 : 0;
}

std::optional<std::vector<int32_t>> Conversation::continuation(const std::string& user,
                                                               const ChatOptions& co) const {
  const auto& m = messages_.as_array();
  if (ids_.empty() || m.empty() || !has_role(m.back(), "assistant")) return std::nullopt;
  ChatOptions closed = co;
  closed.add_generation_prompt = false;
  // What the template writes after a reply's content ("<|im_end|>\n" for Qwen3): found by
  // rendering the history with a marker for the last reply's content.
  static const std::string kMarker = "\x01hearth-reply-end\x01";
  Json marked = messages_;
  marked.as_array().back().set("content", Json(kMarker));
  const std::string history = text_.chat.render(marked, closed);
  const size_t at = history.rfind(kMarker);
  if (at == std::string::npos) return std::nullopt;
  std::string closing = history.substr(at + kMarker.size());
  // A reply that ended on the end token holds it already; one cut short gets it here.
  const std::string end = text_.tokenizer.decode({ids_.back()}, /*skip_special_tokens=*/false);
  if (!end.empty() && closing.compare(0, end.size(), end) == 0) closing.erase(0, end.size());

  // The new user turn as the template renders it after the system prompt (and any tools block).
  Json base = Json::array();
  if (first_turn() == 1) base.push_back(messages_.as_array()[0]);
  std::string before;
  if (!base.as_array().empty()) before = text_.chat.render(base, closed);
  base.push_back(message("user", user));
  const std::string after = text_.chat.render(base, co);
  if (after.compare(0, before.size(), before) != 0) return std::nullopt;

  std::vector<int32_t> ids = ids_;
  const std::vector<int32_t> tail = text_.tokenizer.encode(closing + after.substr(before.size()));
  ids.insert(ids.end(), tail.begin(), tail.end());
  return ids;
}

Conversation::Turn Conversation::prepare(const std::string& user, const ChatOptions& co,
                                         int context, int reserve) const {
  Turn t;
  t.messages = messages_;
  t.messages.push_back(message("user", user));
  if (auto ids = continuation(user, co); ids && int64_t(ids->size()) + reserve <= context) {
    t.prompt = std::move(*ids);
    return t;
  }
  const size_t first = first_turn();
  for (;;) {
    t.prompt = text_.tokenizer.encode(text_.chat.render(t.messages, co));
    if (int64_t(t.prompt.size()) + reserve <= context) return t;
    Json::Array& m = t.messages.as_array();
    if (m.size() - first <= 1)
      throw ContextFull("the message needs " + std::to_string(t.prompt.size()) +
                        " tokens and its answer " + std::to_string(reserve) +
                        " more, but the context holds " + std::to_string(context) + " tokens");
    // The oldest turn: its user message and everything up to the next user message.
    size_t end = first + 1;
    while (end + 1 < m.size() && !has_role(m[end], "user")) ++end;
    m.erase(m.begin() + std::ptrdiff_t(first), m.begin() + std::ptrdiff_t(end));
    t.dropped_messages += int(end - first);
  }
}

void Conversation::commit(const Turn& turn, const std::vector<int32_t>& generated,
                          const std::string& reply) {
  messages_ = turn.messages;
  messages_.push_back(message("assistant", reply));
  ids_.clear();
  // A stop string cuts the text short of the ids; then the next turn renders afresh.
  if (!generated.empty() && text_.tokenizer.decode(generated, true) == reply) {
    ids_ = turn.prompt;
    ids_.insert(ids_.end(), generated.begin(), generated.end());
  }
}

}  // namespace hearth
