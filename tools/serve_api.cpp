#include "tools/serve_api.h"

#include <cmath>

#include "core/error.h"
#include "core/sampler.h"

namespace hearth::serve {

ApiError::ApiError(int status_, std::string message, std::string param_, std::string code_,
                   std::string type_)
    : std::runtime_error(std::move(message)),
      status(status_),
      param(std::move(param_)),
      code(std::move(code_)),
      type(std::move(type_)) {
  if (type.empty())
    type = status == 401   ? "authentication_error"
           : status == 404 ? "not_found_error"
           : status >= 500 ? "server_error"
                           : "invalid_request_error";
}

std::string error_json(const ApiError& e) {
  Json err = Json::object();
  err.set("message", Json(std::string(e.what())));
  err.set("type", Json(e.type));
  err.set("param", e.param.empty() ? Json() : Json(e.param));
  err.set("code", e.code.empty() ? Json() : Json(e.code));
  Json body = Json::object();
  body.set("error", std::move(err));
  return body.dump_python();
}

Json parse_body(const std::string& body) {
  if (body.empty()) throw ApiError(400, "the request body is empty; expected a JSON object");
  Json v;
  try {
    v = Json::parse(body);
  } catch (const Error& e) {
    throw ApiError(400, std::string("the request body is not valid JSON: ") + e.what());
  }
  if (!v.is_object()) throw ApiError(400, "the request body must be a JSON object");
  return v;
}

namespace {

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, "'" + param + "' " + message, param);
}

// A field, or nullptr when absent or null (OpenAI's clients send null for "not set").
const Json* field(const Json& body, const char* key) {
  const Json* v = body.find(key);
  return v && !v->is_null() ? v : nullptr;
}

std::optional<double> number(const Json& body, const char* key, double lo, double hi) {
  const Json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_number()) bad(key, "must be a number");
  const double d = v->as_double();
  if (!std::isfinite(d) || d < lo || d > hi)
    bad(key, "must be between " + pyfmt::float_repr(lo) + " and " + pyfmt::float_repr(hi));
  return d;
}

std::optional<int64_t> integer(const Json& body, const char* key, int64_t lo, int64_t hi) {
  const Json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_int()) bad(key, "must be an integer");
  const int64_t i = v->as_int();
  if (i < lo || i > hi)
    bad(key, "must be between " + std::to_string(lo) + " and " + std::to_string(hi));
  return i;
}

std::optional<bool> boolean(const Json& body, const char* key) {
  const Json* v = field(body, key);
  if (!v) return std::nullopt;
  if (!v->is_bool()) bad(key, "must be true or false");
  return v->as_bool();
}

void check_model(const Json& body, const std::string& served) {
  const Json* m = field(body, "model");
  if (!m) return;  // OpenAI requires it; curl users often leave it out
  if (!m->is_string()) bad("model", "must be a string");
  if (m->as_string() != served && !m->as_string().empty())
    throw ApiError(
        404,
        "The model '" + m->as_string() + "' does not exist; this server serves '" + served + "'",
        "model", "model_not_found");
}

// Fields this server cannot honour are refused rather than ignored: ignoring them would silently
// change the answer.
void refuse_unsupported(const Json& body) {
  if (auto n = integer(body, "n", 1, 1 << 20); n && *n != 1)
    bad("n", "must be 1: this server returns one choice per request");
  if (auto b = integer(body, "best_of", 1, 1 << 20); b && *b != 1) bad("best_of", "must be 1");
  if (const Json* lp = field(body, "logprobs"); lp && !(lp->is_bool() && !lp->as_bool()))
    bad("logprobs", "is not supported");
  if (auto t = integer(body, "top_logprobs", 0, 20); t && *t > 0)
    bad("top_logprobs", "is not supported");
  if (const Json* lb = field(body, "logit_bias"); lb && lb->size() > 0)
    bad("logit_bias", "is not supported");
  if (auto e = boolean(body, "echo"); e && *e) bad("echo", "is not supported");
  if (const Json* s = field(body, "suffix"); s && !(s->is_string() && s->as_string().empty()))
    bad("suffix", "is not supported");
  if (const Json* rf = field(body, "response_format")) {
    const Json* t = rf->is_object() ? rf->find("type") : nullptr;
    if (!t || !t->is_string()) bad("response_format", "must be an object with a string 'type'");
    if (t->as_string() != "text")
      bad("response_format", "type '" + t->as_string() + "' is not supported (only 'text')");
  }
}

std::vector<std::string> stop_strings(const Json& body, const ApiLimits& limits) {
  const Json* s = field(body, "stop");
  std::vector<std::string> out;
  if (!s) return out;
  auto add = [&](const Json& v) {
    if (!v.is_string()) bad("stop", "must be a string or an array of strings");
    if (v.as_string().empty()) bad("stop", "must not contain an empty string");
    if (v.as_string().size() > limits.max_stop_bytes)
      bad("stop", "strings must be at most " + std::to_string(limits.max_stop_bytes) + " bytes");
    out.push_back(v.as_string());
  };
  if (s->is_array()) {
    if (s->size() > limits.max_stops)
      bad("stop", "may hold at most " + std::to_string(limits.max_stops) + " strings");
    for (const Json& v : s->as_array()) add(v);
  } else {
    add(*s);
  }
  return out;
}

// The fields every generation request shares: sampling, limits, stop strings, streaming.
void read_common(const Json& body, const GenerateOptions& defaults, const ApiLimits& limits,
                 ApiRequest& r) {
  refuse_unsupported(body);
  r.gen = defaults;
  SamplingParams& s = r.gen.sampling;
  if (auto v = number(body, "temperature", 0, 2)) s.temperature = float(*v);
  if (auto v = number(body, "top_p", 0, 1)) {
    if (*v == 0) bad("top_p", "must be above 0");
    s.top_p = float(*v);
  }
  if (auto v = integer(body, "top_k", -1, 1 << 30)) s.top_k = int(std::max<int64_t>(*v, 0));
  if (auto v = number(body, "min_p", 0, 1)) s.min_p = float(*v);
  if (auto v = number(body, "presence_penalty", -2, 2)) s.presence_penalty = float(*v);
  if (auto v = number(body, "frequency_penalty", -2, 2)) s.frequency_penalty = float(*v);
  if (auto v = number(body, "repetition_penalty", 0, 10)) {
    if (*v == 0) bad("repetition_penalty", "must be above 0");
    s.repetition_penalty = float(*v);
  }
  if (auto v = integer(body, "seed", INT64_MIN, INT64_MAX)) {
    s.seed = uint64_t(*v);
    r.seeded = true;
  }
  auto max_tokens = integer(body, "max_completion_tokens", 1, 1 << 30);
  if (!max_tokens) max_tokens = integer(body, "max_tokens", 1, 1 << 30);
  r.max_tokens = max_tokens ? std::optional<int>(int(*max_tokens)) : std::nullopt;
  r.stop = stop_strings(body, limits);
  r.stream = boolean(body, "stream").value_or(false);
  if (const Json* so = field(body, "stream_options")) {
    if (!so->is_object()) bad("stream_options", "must be an object");
    if (auto u = boolean(*so, "include_usage")) r.include_usage = *u;
  }
}

// A message's content as the template reads it: a string. OpenAI also allows a list of parts.
std::string content_text(const Json& content, const std::string& where) {
  if (content.is_string()) return content.as_string();
  if (!content.is_array()) bad(where, "must be a string or an array of content parts");
  std::string out;
  for (size_t i = 0; i < content.size(); ++i) {
    const Json& part = content.at(i);
    const std::string pw = where + "[" + std::to_string(i) + "]";
    const Json* type = part.is_object() ? part.find("type") : nullptr;
    if (!type || !type->is_string()) bad(pw, "must be an object with a string 'type'");
    if (type->as_string() != "text")
      bad(pw, "type '" + type->as_string() + "' is not supported (only text)");
    const Json* text = part.find("text");
    if (!text || !text->is_string()) bad(pw + ".text", "must be a string");
    if (!out.empty()) out += "\n";
    out += text->as_string();
  }
  return out;
}

Json normalize_message(const Json& m, size_t i) {
  const std::string where = "messages[" + std::to_string(i) + "]";
  if (!m.is_object()) bad(where, "must be an object");
  const Json* role = m.find("role");
  if (!role || !role->is_string()) bad(where + ".role", "must be a string");
  std::string r = role->as_string();
  if (r == "developer") r = "system";  // OpenAI's newer name for the system role
  if (r != "system" && r != "user" && r != "assistant" && r != "tool")
    bad(where + ".role", "'" + r + "' is not one of system, developer, user, assistant, tool");
  Json out = Json::object();
  out.set("role", Json(r));
  const Json* content = field(m, "content");
  const Json* calls = r == "assistant" ? field(m, "tool_calls") : nullptr;
  if (!content && !calls) bad(where + ".content", "is required");
  out.set("content", Json(content ? content_text(*content, where + ".content") : ""));
  if (calls) {
    if (!calls->is_array()) bad(where + ".tool_calls", "must be an array");
    for (size_t k = 0; k < calls->size(); ++k) {
      const Json& c = calls->at(k);
      const std::string cw = where + ".tool_calls[" + std::to_string(k) + "]";
      if (!c.is_object()) bad(cw, "must be an object");
      // OpenAI's shape wraps the call in "function"; the bare {name, arguments} that
      // transformers' templates also take is accepted too.
      const Json* fn = c.find("function");
      if (fn && !fn->is_object()) bad(cw + ".function", "must be an object");
      const Json* name = (fn ? fn : &c)->find("name");
      if (!name || !name->is_string())
        bad(cw + (fn ? ".function.name" : ".name"), "must be a string");
    }
    out.set("tool_calls", *calls);
  }
  for (const char* key : {"name", "tool_call_id", "reasoning_content"})
    if (const Json* v = field(m, key)) {
      if (!v->is_string()) bad(where + "." + key, "must be a string");
      out.set(key, *v);
    }
  return out;
}

struct ChatInput {
  Json messages;
  ChatOptions options;
  bool tools = false;
};

ChatInput read_chat_input(const Json& body, const ApiLimits& limits) {
  ChatInput in;
  const Json* messages = field(body, "messages");
  if (!messages) bad("messages", "is required");
  if (!messages->is_array()) bad("messages", "must be an array of message objects");
  if (messages->size() == 0) bad("messages", "must not be empty");
  if (messages->size() > limits.max_messages)
    bad("messages", "may hold at most " + std::to_string(limits.max_messages) + " messages");
  in.messages = Json::array();
  for (size_t i = 0; i < messages->size(); ++i)
    in.messages.push_back(normalize_message(messages->at(i), i));

  const Json* tools = field(body, "tools");
  bool offer_tools = tools != nullptr;
  if (tools && !tools->is_array()) bad("tools", "must be an array");
  if (const Json* tc = field(body, "tool_choice")) {
    // The template can offer tools but not force one; "required" and named choices are passed on
    // as offers (documented in the README).
    if (tc->is_string()) {
      const std::string& c = tc->as_string();
      if (c != "none" && c != "auto" && c != "required")
        bad("tool_choice", "must be 'none', 'auto', 'required' or an object");
      if (c == "none") offer_tools = false;
    } else if (!tc->is_object()) {
      bad("tool_choice", "must be a string or an object");
    }
  }
  if (offer_tools && tools->size() > 0) {
    for (size_t i = 0; i < tools->size(); ++i)
      if (!tools->at(i).is_object()) bad("tools[" + std::to_string(i) + "]", "must be an object");
    in.options.tools = *tools;
    in.tools = true;
  }
  if (const Json* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) bad("chat_template_kwargs", "must be an object");
    // enable_thinking goes to the template through ChatOptions (which the reply parser reads
    // too), every other member as it is.
    in.options.extra = Json::object();
    for (const auto& [key, value] : kw->as_object()) {
      if (key != "enable_thinking") {
        in.options.extra.set(key, value);
      } else if (!value.is_null()) {
        if (!value.is_bool()) bad("chat_template_kwargs.enable_thinking", "must be true or false");
        in.options.enable_thinking = value.as_bool();
      }
    }
  }
  if (auto t = boolean(body, "enable_thinking")) in.options.enable_thinking = *t;
  if (auto g = boolean(body, "add_generation_prompt")) in.options.add_generation_prompt = *g;
  return in;
}

std::string render(const TextFrontEnd& text, const ChatInput& in) {
  try {
    return text.chat.render(in.messages, in.options);
  } catch (const Error& e) {  // the template's own raise_exception, or messages it cannot take
    throw ApiError(400, std::string("the chat template rejected the messages: ") + e.what(),
                   "messages");
  }
}

bool ends_inside_think(const std::string& prompt) {
  const size_t open = prompt.rfind("<think>");
  return open != std::string::npos && prompt.find("</think>", open) == std::string::npos;
}

}  // namespace

ApiRequest parse_chat_request(const Json& body, const TextFrontEnd& text,
                              const GenerateOptions& defaults, const ApiLimits& limits,
                              const std::string& model_name) {
  check_model(body, model_name);
  ApiRequest r;
  r.chat = true;
  read_common(body, defaults, limits, r);
  ChatInput in = read_chat_input(body, limits);
  in.options.add_generation_prompt = true;
  r.prompt = render(text, in);
  r.tools = in.tools;
  r.starts_in_reasoning = ends_inside_think(r.prompt);
  return r;
}

ApiRequest parse_completion_request(const Json& body, const GenerateOptions& defaults,
                                    const ApiLimits& limits, const std::string& model_name) {
  check_model(body, model_name);
  ApiRequest r;
  r.chat = false;
  read_common(body, defaults, limits, r);
  const Json* p = field(body, "prompt");
  if (!p) bad("prompt", "is required");
  if (p->is_array() && p->size() == 1 && p->at(size_t(0)).is_string()) p = &p->at(size_t(0));
  if (!p->is_string()) bad("prompt", "must be a string (one prompt per request)");
  r.prompt = p->as_string();
  return r;
}

std::string render_chat_prompt(const Json& body, const TextFrontEnd& text,
                               const ApiLimits& limits) {
  return render(text, read_chat_input(body, limits));
}

void finalize_request(ApiRequest& r, int prompt_tokens, const ApiLimits& limits) {
  const std::string what = r.chat ? "messages" : "prompt";
  if (prompt_tokens == 0) bad(what, "is empty");
  const int max_prompt =
      limits.max_prompt_tokens > 0 ? limits.max_prompt_tokens : limits.context - 1;
  if (prompt_tokens > max_prompt || prompt_tokens >= limits.context)
    throw ApiError(400,
                   "the prompt is " + std::to_string(prompt_tokens) +
                       " tokens; this server takes at most " +
                       std::to_string(std::min(max_prompt, limits.context - 1)),
                   what, "context_length_exceeded");
  const int room = limits.context - prompt_tokens;
  const char* mt = "max_tokens";
  if (r.max_tokens) {
    if (limits.max_tokens > 0 && *r.max_tokens > limits.max_tokens)
      bad(mt, "is " + std::to_string(*r.max_tokens) + "; this server allows at most " +
                  std::to_string(limits.max_tokens));
    if (*r.max_tokens > room)
      throw ApiError(400,
                     "the prompt (" + std::to_string(prompt_tokens) + " tokens) plus max_tokens (" +
                         std::to_string(*r.max_tokens) + ") exceeds the context of " +
                         std::to_string(limits.context) + " tokens",
                     mt, "context_length_exceeded");
    r.gen.max_new_tokens = *r.max_tokens;
  } else {
    r.gen.max_new_tokens = limits.max_tokens > 0 ? std::min(room, limits.max_tokens) : room;
  }
}

}  // namespace hearth::serve
