// The CLI's option parsing and text helpers, tested directly (the CLI as a whole: test_cli.cpp).
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "tools/args.h"
#include "tools/text.h"

using namespace hearth;
using namespace hearth::cli;

namespace {

Args parse(std::vector<std::string> argv, const std::vector<std::string>& spec) {
  std::vector<char*> ptrs;
  for (auto& a : argv) ptrs.push_back(a.data());
  return Args(int(ptrs.size()), ptrs.data(), spec);
}

std::string error_of(std::vector<std::string> argv, const std::vector<std::string>& spec) {
  try {
    parse(std::move(argv), spec);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_SUITE("cli") {
  TEST_CASE("options: values, flags, repeats, a positional and --") {
    const std::vector<std::string> spec = {"--model=", "--stop=*", "--json", "PROMPT"};
    Args a = parse({"--model", "m", "--stop", "a", "--stop=b", "hello", "--json"}, spec);
    CHECK(a.str("--model") == "m");
    CHECK(a.all("--stop") == std::vector<std::string>{"a", "b"});
    CHECK(a.has("--json"));
    REQUIRE(a.positional());
    CHECK(*a.positional() == "hello");
    Args dashes = parse({"--", "--json"}, spec);
    CHECK(!dashes.has("--json"));
    CHECK(*dashes.positional() == "--json");
    CHECK(error_of({"a", "b"}, spec).find("more than one PROMPT") != std::string::npos);
    CHECK(error_of({"x"}, {"--model="}).find("unexpected argument 'x'") != std::string::npos);
    CHECK(parse({"--model", "a", "--model", "b"}, spec).str("--model") == "b");
  }

  TEST_CASE("an unknown option names the nearest known one") {
    const std::vector<std::string> spec = {
        "--top-p=", "--top-k=", "--temperature=", "--model=", "--no-thinking"};
    CHECK(error_of({"--top_p", "1"}, spec).find("did you mean --top-p?") != std::string::npos);
    CHECK(error_of({"--temprature=1"}, spec).find("did you mean --temperature?") !=
          std::string::npos);
    CHECK(error_of({"--no-thiking"}, spec).find("did you mean --no-thinking?") !=
          std::string::npos);
    const std::string far = error_of({"--frobnicate"}, spec);
    CHECK(far.find("unknown option '--frobnicate'") != std::string::npos);
    CHECK(far.find("did you mean") == std::string::npos);
  }

  TEST_CASE("numbers must be finite") {
    const std::vector<std::string> spec = {"--top-p="};
    for (const char* v : {"nan", "inf", "-inf", "1e999"}) {
      CAPTURE(v);
      CHECK_THROWS_AS(parse({"--top-p", v}, spec).number("--top-p", 0), Error);
    }
    CHECK(parse({"--top-p", "0.5"}, spec).number("--top-p", 0) == 0.5);
  }

  TEST_CASE("a reply splits into reasoning and answer at </think>") {
    auto check = [](const std::string& reply, const std::string& reasoning,
                    const std::string& content) {
      CAPTURE(reply);
      const SplitReply s = split_reasoning(reply);
      CHECK(s.reasoning == reasoning);
      CHECK(s.content == content);
    };
    check("<think>\nLet me see.\n</think>\n\nParis.", "Let me see.", "Paris.");
    check("Paris.", "", "Paris.");
    check("<think>\nstill thinking", "still thinking", "");
    // The prompt opened <think> itself: the reply starts inside it.
    check("hmm\n</think>\n\nYes.", "hmm", "Yes.");
    check("<think>\n\n</think>\n\n", "", "");
  }
}
