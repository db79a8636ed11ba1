// What `hearth serve` makes of a chat reply's streamed text (after stop strings have cut it,
// models/stop_filter.h): reasoning (<think>...</think>), content and <tool_call> blocks. It works
// on text as it streams in, holding back only what could still turn out to be a tag, so every byte
// of the answer is sent as soon as it is certain.
#pragma once
#include <string>
#include <vector>

namespace hearth::serve {

struct ToolCall {
  std::string id;         // "call_..." (ReplyParser leaves it empty; the server names it)
  std::string name;       // the function's name
  std::string arguments;  // the arguments object as JSON text
};

struct ReplyDelta {
  enum class Kind { Content, Reasoning, ToolCall } kind;
  std::string text;  // Content and Reasoning
  ToolCall call;     // ToolCall
};

class ReplyParser {
 public:
  struct Options {
    bool reasoning = true;             // a reply that opens with <think> starts with its reasoning
    bool starts_in_reasoning = false;  // the prompt already opened <think> (reasoning first)
    bool tool_calls = false;           // parse <tool_call> blocks (the request offered tools)
  };
  explicit ReplyParser(const Options& opt);

  void push(const std::string& text, std::vector<ReplyDelta>& out);
  // The end of the reply: held-back text is emitted as it is (an unclosed tool call as content).
  void finish(std::vector<ReplyDelta>& out);
  int tool_calls() const { return n_calls_; }

 private:
  enum class State { Start, Reasoning, Content, ToolCall };
  void emit(ReplyDelta::Kind kind, std::string text, std::vector<ReplyDelta>& out);
  void end_tool_call(std::vector<ReplyDelta>& out);
  bool step(std::vector<ReplyDelta>& out);  // consumes what it can of buf_; false: needs more

  Options opt_;
  State state_;
  std::string buf_;              // text not yet consumed
  std::string pending_space_;    // whitespace held back until something follows it
  bool strip_newlines_ = false;  // drop the newlines that follow a tag
  int n_calls_ = 0;
};

// The call in a <tool_call> block's JSON ({"name": ..., "arguments": {...}}); false if it is not
// one.
bool parse_tool_call(const std::string& json, ToolCall& call);

}  // namespace hearth::serve
