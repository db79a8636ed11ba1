// The OpenAI request shapes `hearth serve` accepts, read into what the engine runs: a prompt, the
// generation options, stop strings and how to present the reply. Every field is checked; a bad one
// is an ApiError naming it, answered as a 400 in OpenAI's error shape.
#pragma once
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/scheduler.h"
#include "models/json_value.h"
#include "models/text_frontend.h"

namespace hearth::serve {

// An error answered to the client: its HTTP status and OpenAI's {"error": {...}} fields.
struct ApiError : std::runtime_error {
  ApiError(int status, std::string message, std::string param = "", std::string code = "",
           std::string type = "");
  int status;
  std::string param, code, type;
};

// The error body OpenAI's clients parse.
std::string error_json(const ApiError& e);

// What the model serves by default and what a request may ask for.
struct ApiLimits {
  int context = 0;            // positions a sequence may use (the model's and the KV pool's)
  int max_prompt_tokens = 0;  // 0: context - 1
  int max_tokens = 0;         // cap on max_tokens; 0: none below the context
  size_t max_stops = 16, max_stop_bytes = 256;
  size_t max_messages = 100000;
};

struct ApiRequest {
  bool chat = true;
  bool stream = false;
  bool include_usage = false;        // stream_options.include_usage
  std::string prompt;                // the rendered chat prompt, or the completion prompt
  std::vector<std::string> stop;     // stop strings
  GenerateOptions gen;               // sampling and stop ids; max_new_tokens set by finalize()
  std::optional<int> max_tokens;     // as asked
  bool seeded = false;               // the request named a seed
  bool tools = false;                // chat: tools offered (parse <tool_call> blocks)
  bool starts_in_reasoning = false;  // chat: the prompt ends inside an open <think>
};

// Reads a body. `defaults` holds the sampling and stop ids fields left out take (the checkpoint's
// generation_config.json, as `hearth run` uses it). `model_name` is the id served; a request
// naming another is a 404.
ApiRequest parse_chat_request(const Json& body, const TextFrontEnd& text,
                              const GenerateOptions& defaults, const ApiLimits& limits,
                              const std::string& model_name);
ApiRequest parse_completion_request(const Json& body, const GenerateOptions& defaults,
                                    const ApiLimits& limits, const std::string& model_name);
// /apply-template: the chat prompt a chat request would run.
std::string render_chat_prompt(const Json& body, const TextFrontEnd& text, const ApiLimits& limits);

// Checks the prompt's length and sets gen.max_new_tokens (the request's, or what the context has
// left, under the server's cap).
void finalize_request(ApiRequest& r, int prompt_tokens, const ApiLimits& limits);

// Parses a request body; malformed JSON or a non-object is a 400 saying where.
Json parse_body(const std::string& body);

}  // namespace hearth::serve
