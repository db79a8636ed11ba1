#include "tools/serve_format.h"

namespace hearth::serve {

namespace {

Json base(const ResponseMeta& m, const char* object) {
  Json o = Json::object();
  o.set("id", Json(m.id));
  o.set("object", Json(object));
  o.set("created", Json(m.created));
  o.set("model", Json(m.model));
  o.set("system_fingerprint", Json("hearth-" HEARTH_VERSION));
  return o;
}

Json finish_json(const std::string& finish) {
  return finish.empty() ? Json() : Json(finish);
}

// A body with its one choice, {index: 0, key: value, logprobs: null, finish_reason}.
Json with_choice(const ResponseMeta& m, const char* object, const char* key, Json value,
                 const std::string& finish) {
  Json choice = Json::object();
  choice.set("index", Json(0));
  choice.set(key, std::move(value));
  choice.set("logprobs", Json());
  choice.set("finish_reason", finish_json(finish));
  Json o = base(m, object);
  o.set("choices", Json(Json::Array{std::move(choice)}));
  return o;
}

Json tool_call_json(const ToolCall& c) {
  Json fn = Json::object();
  fn.set("name", Json(c.name));
  fn.set("arguments", Json(c.arguments));
  Json call = Json::object();
  call.set("id", Json(c.id));
  call.set("type", Json("function"));
  call.set("function", std::move(fn));
  return call;
}

}  // namespace

void Reply::add(const ReplyDelta& d) {
  switch (d.kind) {
    case ReplyDelta::Kind::Content:
      content += d.text;
      break;
    case ReplyDelta::Kind::Reasoning:
      reasoning += d.text;
      break;
    case ReplyDelta::Kind::ToolCall:
      tool_calls.push_back(d.call);
      break;
  }
}

Json usage_json(const GenerationResult& r) {
  const int prompt = r.metrics.prompt_tokens;
  const int completion = int(r.tokens.size());
  Json details = Json::object();
  details.set("cached_tokens", Json(cached_tokens(r.metrics)));
  Json u = Json::object();
  u.set("prompt_tokens", Json(prompt));
  u.set("completion_tokens", Json(completion));
  u.set("total_tokens", Json(prompt + completion));
  u.set("prompt_tokens_details", std::move(details));
  return u;
}

std::string chat_response(const ResponseMeta& m, const Reply& reply, const std::string& finish,
                          const GenerationResult& r) {
  Json msg = Json::object();
  msg.set("role", Json("assistant"));
  msg.set("content",
          reply.content.empty() && !reply.tool_calls.empty() ? Json() : Json(reply.content));
  if (!reply.reasoning.empty()) msg.set("reasoning_content", Json(reply.reasoning));
  if (!reply.tool_calls.empty()) {
    Json calls = Json::array();
    for (const ToolCall& c : reply.tool_calls) calls.push_back(tool_call_json(c));
    msg.set("tool_calls", std::move(calls));
  }
  Json o = with_choice(m, "chat.completion", "message", std::move(msg), finish);
  o.set("usage", usage_json(r));
  return o.dump_python();
}

std::string completion_response(const ResponseMeta& m, const std::string& text,
                                const std::string& finish, const GenerationResult& r) {
  Json o = with_choice(m, "text_completion", "text", Json(text), finish);
  o.set("usage", usage_json(r));
  return o.dump_python();
}

std::string sse(const std::string& json) {
  return "data: " + json + "\n\n";
}

std::string chat_chunk(const ResponseMeta& m, Json delta, const std::string& finish) {
  return sse(
      with_choice(m, "chat.completion.chunk", "delta", std::move(delta), finish).dump_python());
}

std::string delta_chunk(const ResponseMeta& m, const ReplyDelta& d, int& tool_index) {
  Json delta = Json::object();
  switch (d.kind) {
    case ReplyDelta::Kind::Content:
      delta.set("content", Json(d.text));
      break;
    case ReplyDelta::Kind::Reasoning:
      delta.set("reasoning_content", Json(d.text));
      break;
    case ReplyDelta::Kind::ToolCall: {
      Json call = tool_call_json(d.call);
      Json indexed = Json::object();  // OpenAI puts the index first
      indexed.set("index", Json(tool_index++));
      for (auto& [k, v] : call.as_object()) indexed.set(k, v);
      delta.set("tool_calls", Json(Json::Array{std::move(indexed)}));
      break;
    }
  }
  return chat_chunk(m, std::move(delta), "");
}

std::string usage_chunk(const ResponseMeta& m, const GenerationResult& r) {
  Json o = base(m, m.chat ? "chat.completion.chunk" : "text_completion");
  o.set("choices", Json::array());
  o.set("usage", usage_json(r));
  return sse(o.dump_python());
}

std::string completion_chunk(const ResponseMeta& m, const std::string& text,
                             const std::string& finish) {
  return sse(with_choice(m, "text_completion", "text", Json(text), finish).dump_python());
}

}  // namespace hearth::serve
