// Conversation (models/conversation.h): a next turn continues the exact ids of the turns before,
// with the template's text between them written out here from Qwen3's format, and old turns are
// dropped to fit the context.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "models/conversation.h"

using namespace hearth;

namespace {

const std::string kModel = std::string(HEARTH_SHARED_DIR) + "/fixtures/models/tiny-tied-bf16";

std::vector<int32_t> cat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Json msg(const char* role, const char* content) {
  return Json(Json::Object{{"role", Json(role)}, {"content", Json(content)}});
}

}  // namespace

TEST_CASE("a chat turn continues the previous turn's exact ids, thinking on or off") {
  const TextFrontEnd text = TextFrontEnd::load(kModel);
  const Tokenizer& tok = text.tokenizer;
  const int32_t im_end = tok.token_id("<|im_end|>");
  REQUIRE(im_end >= 0);
  for (bool thinking : {false, true}) {
    CAPTURE(thinking);
    ChatOptions co;
    co.enable_thinking = thinking;
    const std::string opening =
        std::string("<|im_start|>assistant\n") + (thinking ? "" : "<think>\n\n</think>\n\n");
    Conversation c(text, std::string("Be brief."));
    const Conversation::Turn t1 = c.prepare("Hello", co, 4096, 64);
    CHECK(t1.prompt == tok.encode("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n"
                                  "Hello<|im_end|>\n" +
                                  opening));
    CHECK(t1.dropped_messages == 0);

    // Ended by the end token: the next turn is those ids, "\n" and the new user turn.
    const std::string answer = thinking ? "<think>\nhmm\n</think>\n\nHi there." : "Hi there.";
    const std::vector<int32_t> reply1 = cat(tok.encode(answer), {im_end});
    c.commit(t1, reply1, answer);
    const Conversation::Turn t2 = c.prepare("Again", co, 4096, 64);
    CHECK(t2.prompt == cat(cat(t1.prompt, reply1),
                           tok.encode("\n<|im_start|>user\nAgain<|im_end|>\n" + opening)));

    // Cut short by the length limit: the template's closing is added, end token included.
    const std::vector<int32_t> reply2 = tok.encode("Again?");
    c.commit(t2, reply2, "Again?");
    const Conversation::Turn t3 = c.prepare("Third", co, 4096, 64);
    CHECK(t3.prompt ==
          cat(cat(t2.prompt, reply2),
              tok.encode("<|im_end|>\n<|im_start|>user\nThird<|im_end|>\n" + opening)));
    CHECK(c.messages().size() == 5);  // system, and two turns of user and assistant
  }
}

TEST_CASE("a reply cut by a stop string, or an added message, renders the conversation afresh") {
  const TextFrontEnd text = TextFrontEnd::load(kModel);
  ChatOptions co;
  co.enable_thinking = false;
  Conversation c(text, std::nullopt);
  const Conversation::Turn t1 = c.prepare("Hello", co, 4096, 64);
  c.commit(t1, text.tokenizer.encode("Hi there. STOP more"), "Hi there. ");
  Json want = Json::array();
  want.push_back(msg("user", "Hello"));
  want.push_back(msg("assistant", "Hi there. "));
  want.push_back(msg("user", "Next"));
  CHECK(c.prepare("Next", co, 4096, 64).prompt ==
        text.tokenizer.encode(text.chat.render(want, co)));

  c.add("user", "a message added by hand");
  const Conversation::Turn t = c.prepare("Next", co, 4096, 64);
  CHECK(t.messages.size() == 4);
  CHECK(t.prompt == text.tokenizer.encode(text.chat.render(t.messages, co)));
}

TEST_CASE("a full context drops the oldest turns and keeps the system prompt") {
  const TextFrontEnd text = TextFrontEnd::load(kModel);
  ChatOptions co;
  co.enable_thinking = false;
  Conversation c(text, std::string("System."));
  for (const char* u : {"first question here", "second question here"}) {
    const Conversation::Turn t = c.prepare(u, co, 4096, 16);
    c.commit(t, text.tokenizer.encode("an answer of some length"), "an answer of some length");
  }
  const Conversation::Turn all = c.prepare("third", co, 4096, 16);
  // A context that holds the last turns but not all of them.
  const int context = int(all.prompt.size()) - 10 + 16;
  const Conversation::Turn t = c.prepare("third", co, context, 16);
  CHECK(t.dropped_messages == 2);
  const auto& m = t.messages.as_array();
  REQUIRE(m.size() == 4);
  CHECK(m[0].at("content").as_string() == "System.");
  CHECK(m[1].at("content").as_string() == "second question here");
  CHECK(m[3].at("content").as_string() == "third");
  CHECK(t.prompt == text.tokenizer.encode(text.chat.render(t.messages, co)));
  CHECK(int(t.prompt.size()) + 16 <= context);

  CHECK_THROWS_AS(c.prepare("third", co, 20, 16), ContextFull);
}
