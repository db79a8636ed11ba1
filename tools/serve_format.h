// The response bodies of `hearth serve`, in the shapes OpenAI's clients parse: whole chat and text
// completions, their streamed chunks, and usage.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/scheduler.h"
#include "models/json_value.h"
#include "tools/serve_reply.h"

namespace hearth::serve {

struct ResponseMeta {
  std::string id;       // "chatcmpl-..." or "cmpl-...", the same in every chunk
  int64_t created = 0;  // Unix seconds
  std::string model;
  bool chat = true;
};

// A reply gathered whole, for a non-streaming response.
struct Reply {
  std::string content, reasoning;
  std::vector<ToolCall> tool_calls;
  void add(const ReplyDelta& d);
};

// Prompt tokens taken from the prefix cache instead of computed.
inline int cached_tokens(const GenerationMetrics& m) {
  return m.prompt_tokens - m.prefill_tokens;
}
Json usage_json(const GenerationResult& r);
std::string chat_response(const ResponseMeta& m, const Reply& reply, const std::string& finish,
                          const GenerationResult& r);
std::string completion_response(const ResponseMeta& m, const std::string& text,
                                const std::string& finish, const GenerationResult& r);

// One SSE event, "data: {json}\n\n". finish empty: null. tool_index: the next tool call's index.
std::string sse(const std::string& json);
std::string chat_chunk(const ResponseMeta& m, Json delta, const std::string& finish);
std::string delta_chunk(const ResponseMeta& m, const ReplyDelta& d, int& tool_index);
std::string usage_chunk(const ResponseMeta& m, const GenerationResult& r);
std::string completion_chunk(const ResponseMeta& m, const std::string& text,
                             const std::string& finish);

}  // namespace hearth::serve
