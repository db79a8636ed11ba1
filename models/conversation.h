// A chat conversation as the model sees it: the messages so far, and the exact token ids its last
// turn left in the cache.
//
// Chat templates render history differently from how it was generated: Qwen3's drops a past
// answer's thinking, and the empty think block of a turn without thinking. Re-rendering every turn
// would then recompute the previous answer each time, so a next turn continues the exact ids: the
// previous prompt and reply, the template's text after a reply (less the end token when the reply
// holds it), and the new user turn as the template renders it. When that would not fit the context,
// the oldest turns are dropped (the system prompt stays) and the conversation is rendered afresh.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/text_frontend.h"

namespace hearth {

// The newest message alone does not fit the context (prepare's error, so callers can tell it from
// a template's).
class ContextFull : public Error {
 public:
  using Error::Error;
};

class Conversation {
 public:
  Conversation(const TextFrontEnd& text, std::optional<std::string> system_prompt);

  // Messages as the template reads them ({role, content} objects), system prompt first.
  const Json& messages() const { return messages_; }
  void reset();                      // back to the system prompt alone
  void set_messages(Json messages);  // a saved conversation, replacing this one
  void add(const std::string& role, const std::string& content);  // without generating

  struct Turn {
    Json messages;                // the conversation with the new user message, after trimming
    std::vector<int32_t> prompt;  // the ids to generate from
    int dropped_messages = 0;     // the oldest messages left out to fit the context
  };
  // The prompt for the reply to `user`, leaving `reserve` of `context` positions for the reply.
  // Throws ContextFull naming the sizes when the newest message alone does not leave that.
  Turn prepare(const std::string& user, const ChatOptions& co, int context, int reserve) const;
  // Records the turn and its reply: the generated ids (with the end token when one ended it) and
  // the reply's text, which becomes the assistant message. When the ids decode to that text (no
  // stop string cut it short), the next turn continues them.
  void commit(const Turn& turn, const std::vector<int32_t>& generated, const std::string& reply);

 private:
  std::optional<std::vector<int32_t>> continuation(const std::string& user,
                                                   const ChatOptions& co) const;
  size_t first_turn() const;  // index of the first message after the system prompt

  const TextFrontEnd& text_;
  std::optional<std::string> system_;
  Json messages_;
  std::vector<int32_t> ids_;  // the conversation so far as the cache holds it; empty: re-render
};

}  // namespace hearth
