// hearth serve's request reading, stop strings and reply splitting (tools/serve_api.h,
// models/stop_filter.h, tools/serve_reply.h), against hand-written expectations. The HTTP side is
// tested by the clients in tests/serve/.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "models/stop_filter.h"
#include "tools/serve_api.h"
#include "tools/serve_reply.h"

using namespace hearth;
using namespace hearth::serve;

namespace {

// Feeds `text` to the filter in pieces of `step` bytes and joins what comes out.
std::string filter(const std::vector<std::string>& stops, const std::string& text, size_t step,
                   bool* stopped = nullptr) {
  StopFilter f(stops);
  std::string out;
  for (size_t i = 0; i < text.size(); i += step) out += f.push(text.substr(i, step));
  out += f.finish();
  if (stopped) *stopped = f.matched();
  return out;
}

struct Split {
  std::string reasoning, content;
  std::vector<ToolCall> calls;
  int content_deltas = 0;
};

Split parse(const ReplyParser::Options& opt, const std::string& text, size_t step) {
  ReplyParser p(opt);
  std::vector<ReplyDelta> out;
  for (size_t i = 0; i < text.size(); i += step) p.push(text.substr(i, step), out);
  p.finish(out);
  Split s;
  for (const ReplyDelta& d : out) {
    if (d.kind == ReplyDelta::Kind::Reasoning) s.reasoning += d.text;
    if (d.kind == ReplyDelta::Kind::Content) s.content += d.text, ++s.content_deltas;
    if (d.kind == ReplyDelta::Kind::ToolCall) s.calls.push_back(d.call);
  }
  return s;
}

const ReplyParser::Options kChat{true, false, false};
const ReplyParser::Options kTools{true, false, true};

std::string param_of(const std::string& json) {
  try {
    parse_completion_request(parse_body(json), GenerateOptions{}, ApiLimits{}, "m");
  } catch (const ApiError& e) {
    CHECK(e.status == 400);
    return e.param;
  }
  return "(accepted)";
}

}  // namespace

TEST_SUITE("serve") {
  TEST_CASE("stop strings cut the text wherever the pieces fall") {
    for (size_t step : {1, 2, 3, 7, 100}) {
      CAPTURE(step);
      bool stopped = false;
      CHECK(filter({"END"}, "hello wEND world", step, &stopped) == "hello w");
      CHECK(stopped);
      CHECK(filter({"END"}, "no stop here, EN", step, &stopped) == "no stop here, EN");
      CHECK_FALSE(stopped);
      // The earliest match wins, whichever string it is; overlapping prefixes are held right.
      CHECK(filter({"abd", "bc"}, "xxabcabd", step) == "xxa");
      CHECK(filter({"aab"}, "aaaab!", step) == "aa");
    }
    StopFilter f({"zz"});
    CHECK(f.push("az") == "a");  // "z" might start the stop string
    CHECK(f.push("b") == "zb");
  }

  TEST_CASE("a reply splits into reasoning and content, byte by byte or at once") {
    const std::string text = "<think>\nLet me see.\n\n</think>\n\nThe answer is 4.";
    for (size_t step : {1, 2, 5, 100}) {
      CAPTURE(step);
      Split s = parse(kChat, text, step);
      CHECK(s.reasoning == "Let me see.");
      CHECK(s.content == "The answer is 4.");
    }
    // The prompt opened the think block (as newer Qwen3 templates do).
    Split s = parse({true, true, false}, "\nhmm\n</think>\n\nok", 1);
    CHECK(s.reasoning == "hmm");
    CHECK(s.content == "ok");
    // No think block: content untouched, whitespace included; a tag-like prefix stays text.
    CHECK(parse(kChat, "  plain <thin", 1).content == "  plain <thin");
    CHECK(parse(kChat, "<thin", 1).content == "<thin");
    // An empty think block (enable_thinking=false renders one into the prompt, not the reply).
    s = parse(kChat, "<think>\n\n</think>\n\nHi", 3);
    CHECK(s.reasoning.empty());
    CHECK(s.content == "Hi");
    // Reasoning cut off by max_tokens stays reasoning.
    CHECK(parse(kChat, "<think>\nstill going</thi", 2).reasoning == "still going</thi");
  }

  TEST_CASE("tool calls are parsed out of the content") {
    const std::string text =
        "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
        "\"Paris\", \"days\": 2}}\n</tool_call>\n<tool_call>\n{\"name\": \"now\", \"arguments\": "
        "{}}\n</tool_call>";
    for (size_t step : {1, 4, 1000}) {
      CAPTURE(step);
      Split s = parse(kTools, text, step);
      CHECK(s.content == "Let me check.");
      REQUIRE(s.calls.size() == 2);
      CHECK(s.calls[0].name == "get_weather");
      CHECK(s.calls[0].arguments == "{\"city\": \"Paris\", \"days\": 2}");
      CHECK(s.calls[1].name == "now");
      CHECK(s.calls[1].arguments == "{}");
    }
    // Without tools offered the tags are text.
    CHECK(parse(kChat, text, 3).content == text);
    // Not a call (bad JSON, no name) or cut off: the model's text, kept as content.
    Split bad = parse(kTools, "<tool_call>\n{\"nam\": 1}\n</tool_call>", 2);
    CHECK(bad.calls.empty());
    CHECK(bad.content == "<tool_call>\n{\"nam\": 1}\n</tool_call>");
    Split cut = parse(kTools, "x <tool_call>\n{\"name\": \"f\", \"argu", 2);
    CHECK(cut.calls.empty());
    CHECK(cut.content == "x<tool_call>\n{\"name\": \"f\", \"argu");
    ToolCall c;
    CHECK(parse_tool_call("{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}", c));
    CHECK(c.arguments == "{\"a\": 1}");  // arguments already given as JSON text
  }

  TEST_CASE("request fields are checked and a bad one is named") {
    CHECK(param_of(R"({"prompt": "x"})") == "(accepted)");
    CHECK(param_of(R"({"prompt": "x", "unknown_field": {"a": 1}})") == "(accepted)");
    CHECK(param_of(R"({"prompt": "x", "temperature": "hot"})") == "temperature");
    CHECK(param_of(R"({"prompt": "x", "temperature": 3})") == "temperature");
    CHECK(param_of(R"({"prompt": "x", "top_p": 0})") == "top_p");
    CHECK(param_of(R"({"prompt": "x", "max_tokens": -1})") == "max_tokens");
    CHECK(param_of(R"({"prompt": "x", "max_tokens": 2.5})") == "max_tokens");
    CHECK(param_of(R"({"prompt": "x", "n": 2})") == "n");
    CHECK(param_of(R"({"prompt": "x", "stop": [""]})") == "stop");
    CHECK(param_of(R"({"prompt": "x", "stop": 5})") == "stop");
    CHECK(param_of(R"({"prompt": "x", "logprobs": true})") == "logprobs");
    CHECK(param_of(R"({"prompt": "x", "response_format": {"type": "json_object"}})") ==
          "response_format");
    CHECK(param_of(R"({"prompt": 5})") == "prompt");
    CHECK(param_of(R"({"stream": true})") == "prompt");
    CHECK(param_of(R"({"prompt": "x", "stream": "yes"})") == "stream");
    CHECK_THROWS_AS(parse_body("{\"a\": "), ApiError);
    CHECK_THROWS_AS(parse_body("[1]"), ApiError);
    CHECK_THROWS_AS(parse_body("\"\xff\""), ApiError);  // invalid UTF-8
    try {
      parse_completion_request(parse_body(R"({"model": "other", "prompt": "x"})"), {}, {}, "m");
      FAIL("accepted another model's name");
    } catch (const ApiError& e) {
      CHECK(e.status == 404);
      CHECK(e.code == "model_not_found");
    }
  }

  TEST_CASE("sampling fields override the checkpoint's defaults, one by one") {
    GenerateOptions d;
    d.sampling.temperature = 0.6f;
    d.sampling.top_k = 20;
    d.stop_ids = {7};
    ApiRequest r = parse_completion_request(
        parse_body(R"({"prompt": "x", "temperature": 0.9, "seed": 5, "stop": "##",
                       "max_tokens": 3, "stream": true, "stream_options": {"include_usage": true}})"),
        d, ApiLimits{}, "m");
    CHECK(r.gen.sampling.temperature == doctest::Approx(0.9));
    CHECK(r.gen.sampling.top_k == 20);
    CHECK(r.gen.sampling.seed == 5);
    CHECK(r.seeded);
    CHECK(r.gen.stop_ids == std::vector<int32_t>{7});
    CHECK(r.stop == std::vector<std::string>{"##"});
    CHECK(*r.max_tokens == 3);
    CHECK(r.stream);
    CHECK(r.include_usage);
  }

  TEST_CASE("enable_thinking reaches the template from either place, once") {
    const TextFrontEnd text =
        TextFrontEnd::load(std::string(HEARTH_SHARED_DIR) + "/fixtures/models/tiny-tied-bf16");
    const std::string empty_think = "<think>\n\n</think>\n\n";
    auto prompt = [&](const std::string& extra) {
      const std::string body = R"({"messages": [{"role": "user", "content": "Hi"}])" + extra + "}";
      return parse_chat_request(parse_body(body), text, {}, {}, "m").prompt;
    };
    auto ends_with = [](const std::string& s, const std::string& tail) {
      return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
    };
    CHECK(ends_with(prompt(""), "<|im_start|>assistant\n"));
    CHECK(
        ends_with(prompt(R"(, "chat_template_kwargs": {"enable_thinking": false})"), empty_think));
    CHECK(ends_with(prompt(R"(, "enable_thinking": false)"), empty_think));
    CHECK(ends_with(
        prompt(
            R"(, "enable_thinking": false, "chat_template_kwargs": {"enable_thinking": false, "x": 1})"),
        empty_think));
    CHECK(ends_with(prompt(R"(, "chat_template_kwargs": {"enable_thinking": true})"),
                    "<|im_start|>assistant\n"));
  }

  TEST_CASE("the context bounds prompts and max_tokens") {
    ApiLimits lim;
    lim.context = 100;
    ApiRequest r;
    finalize_request(r, 30, lim);
    CHECK(r.gen.max_new_tokens == 70);  // what the context has left
    r.max_tokens = 70;
    finalize_request(r, 30, lim);
    CHECK(r.gen.max_new_tokens == 70);
    r.max_tokens = 71;
    CHECK_THROWS_AS(finalize_request(r, 30, lim), ApiError);
    r.max_tokens.reset();
    CHECK_THROWS_AS(finalize_request(r, 100, lim), ApiError);
    CHECK_THROWS_AS(finalize_request(r, 0, lim), ApiError);
    lim.max_tokens = 10;
    finalize_request(r, 30, lim);
    CHECK(r.gen.max_new_tokens == 10);
    r.max_tokens = 11;
    CHECK_THROWS_AS(finalize_request(r, 30, lim), ApiError);
    lim.max_prompt_tokens = 20;
    r.max_tokens = 5;
    CHECK_THROWS_AS(finalize_request(r, 21, lim), ApiError);
  }
}
