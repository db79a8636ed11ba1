// Feeds the input, split at its first NUL byte, as a Jinja template (Template::parse: lexer and
// parser) and a JSON context (Json::parse) to Template::render. A context that is not a JSON object
// is replaced by a chat-like one (messages, tools, add_generation_prompt), so templates the mutator
// makes still get data to loop over. The render budget (jinja::Limits) is cut to 1/200 of its
// defaults, which take minutes under the sanitizers (100 000 steps take about 3 s): the budget
// itself is under test, and anything it misses is caught by libFuzzer's -timeout and
// -rss_limit_mb (scripts/fuzz.sh).
#include <cstdint>

#include "core/error.h"
#include "models/jinja.h"
#include "tests/fuzz/fuzz_util.h"

using namespace hearth;

namespace {

const Json& default_context() {
  static const Json ctx = Json::parse(R"({
    "messages": [{"role": "system", "content": "Be brief."},
                 {"role": "user", "content": "Hi <think>x</think>"},
                 {"role": "assistant", "content": "Hello", "reasoning_content": "r",
                  "tool_calls": [{"function": {"name": "f", "arguments": {"a": [1, 2.5, null]}}}]},
                 {"role": "tool", "content": "42"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    "add_generation_prompt": true, "enable_thinking": false, "bos_token": "", "eos_token": "<|im_end|>"
  })");
  return ctx;
}

jinja::Limits limits() {
  jinja::Limits l;
  l.max_steps /= 200;
  l.max_output /= 200;
  l.max_value /= 200;
  l.max_work /= 200;
  return l;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto parts = fuzz::split_nul(data, size, 2);
  jinja::Template t;
  try {
    t = jinja::Template::parse(parts[0]);
  } catch (const Error& e) {
    fuzz::refused(e);
    return 0;
  }
  Json ctx;
  try {
    ctx = Json::parse(parts[1]);
  } catch (const Error& e) {
    fuzz::refused(e);
  }
  if (!ctx.is_object()) ctx = default_context();
  try {
    (void)t.render(ctx, limits());
  } catch (const Error& e) {
    fuzz::refused(e);
  }
  return 0;
}
