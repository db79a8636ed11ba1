// Runs one API request on the shared engine and turns its tokens into reply deltas: token ids ->
// UTF-8 text (held back while incomplete) -> stop strings -> reasoning / content / tool calls.
#pragma once
#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "core/engine.h"
#include "models/text_frontend.h"
#include "tools/serve_api.h"
#include "tools/serve_reply.h"

namespace hearth::serve {

struct RunOutcome {
  GenerationResult result;     // tokens and metrics from the engine
  std::string finish_reason;   // "stop", "length", "tool_calls", or "cancelled"
  bool client_gone = false;    // on_deltas said the client could take no more
  double first_token_ms = -1;  // since the run began; -1: no token
  double last_token_ms = -1;
};

// on_deltas gets each batch of deltas as it becomes certain (tool calls with their ids set);
// returning false means the client is gone, which ends the sequence at the next step. cancel, set
// from any thread, ends it too (finish reason "cancelled"). Throws hearth::Error when a step fails.
RunOutcome run_request(Engine& engine, const TextFrontEnd& text, const ApiRequest& req,
                       const std::vector<int32_t>& prompt,
                       const std::function<bool(std::vector<ReplyDelta>&)>& on_deltas,
                       const std::atomic<bool>* cancel);

// A random id with a prefix: "chatcmpl-...", "call_...".
std::string random_id(const char* prefix);

}  // namespace hearth::serve
