// Feeds the input as an HTTP request body to hearth serve's request reading (tools/serve_api.cpp),
// as Server::read_request does for each route: parse_body, then parse_chat_request (rendering the
// tiny-tied-bf16 fixture's real chat template), parse_completion_request and render_chat_prompt
// (/apply-template); an accepted request's prompt is tokenized and finalize_request'ed. A bad body
// must be an ApiError (a 4xx): anything else escaping would be answered as a 500.
#include <cstdint>

#include "core/error.h"
#include "models/text_frontend.h"
#include "tests/fuzz/fuzz_util.h"
#include "tools/serve_api.h"

using namespace hearth;
using namespace hearth::serve;

namespace {

const TextFrontEnd& frontend() {
  static const TextFrontEnd t =
      TextFrontEnd::load(HEARTH_SHARED_DIR "/fixtures/models/tiny-tied-bf16");
  return t;
}

ApiLimits limits() {
  ApiLimits l;
  l.context = 4096;
  l.max_tokens = 1024;
  return l;
}

void client_error(const ApiError& e) {
  fuzz::refused(e);
  FUZZ_CHECK(e.status >= 400 && e.status < 500);
  const Json body = Json::parse(error_json(e));  // what the client gets must be JSON
  FUZZ_CHECK(body.find("error") != nullptr);
}

void finish(ApiRequest& r, const ApiLimits& lim) {
  const std::vector<int32_t> prompt = frontend().tokenizer.encode(r.prompt);
  finalize_request(r, int(prompt.size()), lim);
  FUZZ_CHECK(r.gen.max_new_tokens >= 1);
  FUZZ_CHECK(int64_t(prompt.size()) + r.gen.max_new_tokens <= lim.context);
  FUZZ_CHECK(r.stop.size() <= lim.max_stops);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)frontend();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string raw(reinterpret_cast<const char*>(data), size);
  const ApiLimits lim = limits();
  GenerateOptions defaults;
  defaults.stop_ids = frontend().stop_ids({});
  Json body;
  try {
    body = parse_body(raw);
  } catch (const ApiError& e) {
    client_error(e);
    return 0;
  }
  try {
    ApiRequest r = parse_chat_request(body, frontend(), defaults, lim, "hearth");
    finish(r, lim);
  } catch (const ApiError& e) {
    client_error(e);
  }
  try {
    ApiRequest r = parse_completion_request(body, defaults, lim, "hearth");
    finish(r, lim);
  } catch (const ApiError& e) {
    client_error(e);
  }
  try {
    (void)render_chat_prompt(body, frontend(), lim);
  } catch (const ApiError& e) {
    client_error(e);
  }
  return 0;
}
