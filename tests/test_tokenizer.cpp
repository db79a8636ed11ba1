// Tokenizer against the Hugging Face `tokenizers` golden cases in ../shared/fixtures/tokenizer,
// plus error handling and properties the fixtures do not pin down.
#include <doctest/doctest.h>
#include <simdjson.h>
#include <utf8proc.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "models/tokenizer.h"

using hearth::StreamDecoder;
using hearth::Tokenizer;

namespace {

const std::string kShared = HEARTH_SHARED_DIR;

const Tokenizer& qwen() {
  static const Tokenizer t = Tokenizer::load(kShared + "/qwen3-tokenizer");
  return t;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  REQUIRE_MESSAGE(f.good(), "cannot open " << path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// One parsed JSON line; the parser is kept alive with the element that points into it.
struct Case {
  std::shared_ptr<simdjson::dom::parser> parser = std::make_shared<simdjson::dom::parser>();
  simdjson::dom::element e;
  std::string str(const char* key) const { return std::string(std::string_view(e[key])); }
  std::vector<int32_t> ids(const char* key) const {
    std::vector<int32_t> v;
    for (auto x : e[key].get_array()) v.push_back(int32_t(int64_t(x)));
    return v;
  }
  std::vector<std::string> strs(const char* key) const {
    std::vector<std::string> v;
    for (auto x : e[key].get_array()) v.emplace_back(std::string_view(x));
    return v;
  }
};

std::vector<Case> read_cases(const std::string& name) {
  std::istringstream in(slurp(kShared + "/fixtures/tokenizer/" + name));
  std::vector<Case> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    Case c;
    REQUIRE_MESSAGE(!c.parser->parse(line).get(c.e), name << ": bad line");
    out.push_back(std::move(c));
  }
  REQUIRE(!out.empty());
  return out;
}

// NFC computed by utf8proc directly, independently of the tokenizer's quick-check path.
std::string nfc_ref(const std::string& s) {
  utf8proc_uint8_t* out = nullptr;
  auto n =
      utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), utf8proc_ssize_t(s.size()),
                   &out, utf8proc_option_t(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
  REQUIRE(n >= 0);
  std::string r(reinterpret_cast<char*>(out), size_t(n));
  std::free(out);
  return r;
}

std::string join_ids(const std::vector<int32_t>& v) {
  std::string s;
  for (int32_t x : v) s += std::to_string(x) + " ";
  return s;
}

std::string stream_decode(const Tokenizer& t, const std::vector<int32_t>& ids, bool skip) {
  StreamDecoder d(t, skip);
  std::string s;
  for (int32_t id : ids) s += d.push(id);
  return s + d.flush();
}

// A tiny byte-level BPE tokenizer.json: all 256 byte symbols plus a few merges in `merges`.
std::string tiny_json(const std::string& merges, const std::string& model_type = "BPE") {
  std::string vocab;
  int id = 0;
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    uint32_t cp = printable ? uint32_t(b) : next++;
    std::string ch;
    if (cp < 0x80) {
      ch = std::string(1, char(cp));
      if (ch == "\"" || ch == "\\") ch = "\\" + ch;
    } else {
      ch += char(0xC0 | (cp >> 6));
      ch += char(0x80 | (cp & 0x3F));
    }
    vocab += "\"" + ch + "\":" + std::to_string(id++) + ",";
  }
  vocab += "\"ab\":256,\"abc\":257,\"Ġa\":258";
  return R"({"version":"1.0","truncation":null,"padding":null,
    "added_tokens":[{"id":259,"content":"<|end|>","single_word":false,"lstrip":false,
      "rstrip":false,"normalized":false,"special":true},
      {"id":260,"content":"<x>","single_word":false,"lstrip":true,"rstrip":true,
      "normalized":false,"special":false},
      {"id":261,"content":"<w>","single_word":true,"lstrip":false,"rstrip":false,
      "normalized":false,"special":false},
      {"id":262,"content":"cafe\u0301","single_word":false,"lstrip":false,"rstrip":false,
      "normalized":true,"special":false}],
    "normalizer":{"type":"NFC"},
    "pre_tokenizer":{"type":"Sequence","pretokenizers":[
      {"type":"Split","pattern":{"Regex":" ?\\S+|\\s+"},"behavior":"Isolated","invert":false},
      {"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false}]},
    "post_processor":null,
    "decoder":{"type":"ByteLevel","add_prefix_space":false,"trim_offsets":false,"use_regex":false},
    "model":{"type":")" +
         model_type + R"(","dropout":null,"unk_token":null,"vocab":{)" + vocab + "}" + merges +
         "}}";
}

std::string error_of(const std::string& json) {
  try {
    Tokenizer::from_json(json, "");
  } catch (const hearth::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_SUITE("tokenizer") {
  TEST_CASE("loads the Qwen3 tokenizer") {
    const Tokenizer& t = qwen();
    CHECK(t.vocab_size() == 151669);
    CHECK(t.token_id("<|im_end|>") == 151645);
    CHECK(t.token_id("<think>") == 151667);
    CHECK(t.token_id("Hello") == 9707);
    CHECK(t.token_id("no such token") == -1);
    CHECK(t.token_text(9707) == "Hello");
    CHECK(t.token_text(21927) == "ĠHello");
    CHECK(t.token_text(151645) == "<|im_end|>");
    CHECK(t.token_text(151700).empty());
    CHECK(t.eos_token() == "<|im_end|>");
    CHECK(t.bos_token().empty());
    CHECK(t.chat_template().find("<|im_start|>") != std::string::npos);
    for (int32_t id = 151640; id < 151936; ++id) {
      CHECK_MESSAGE(t.is_special(id) == (id >= 151643 && id <= 151656), "id " << id);
    }
    CHECK(!t.is_special(-1));
  }

  TEST_CASE("encode matches tokenize.jsonl") {
    const Tokenizer& t = qwen();
    int failures = 0, n = 0;
    for (const Case& c : read_cases("tokenize.jsonl")) {
      ++n;
      std::string text = c.str("text");
      std::vector<int32_t> want = c.ids("ids"), got = t.encode(text);
      if (got != want && ++failures <= 20) {
        FAIL_CHECK(c.str("name") << ": got " << join_ids(got) << "want " << join_ids(want));
      }
      // The fixture invariant: decoding the ids gives back the normalized text.
      if (t.decode(want, false) != nfc_ref(text) && ++failures <= 20) {
        FAIL_CHECK(c.str("name") << ": decode(ids) != NFC(text)");
      }
    }
    CHECK(failures == 0);
    MESSAGE("tokenize cases: " << n);
  }

  TEST_CASE("pretokenize matches pretokenize.jsonl") {
    const Tokenizer& t = qwen();
    int failures = 0, n = 0;
    for (const Case& c : read_cases("pretokenize.jsonl")) {
      ++n;
      std::vector<std::string> want = c.strs("pieces"), got = t.pretokenize(c.str("text"));
      if (got != want && ++failures <= 20) {
        std::string g, w;
        for (auto& s : got) g += "[" + s + "]";
        for (auto& s : want) w += "[" + s + "]";
        FAIL_CHECK(c.str("name") << ": got " << g << " want " << w);
      }
    }
    CHECK(failures == 0);
    MESSAGE("pretokenize cases: " << n);
  }

  TEST_CASE("decode and stream decode match decode.jsonl") {
    const Tokenizer& t = qwen();
    int failures = 0, n = 0;
    for (const Case& c : read_cases("decode.jsonl")) {
      ++n;
      std::vector<int32_t> ids = c.ids("ids");
      bool skip = bool(c.e["skip_special_tokens"]);
      std::string want = c.str("text");
      if (t.decode(ids, skip) != want && ++failures <= 20) {
        FAIL_CHECK(c.str("name") << ": decode got \"" << t.decode(ids, skip) << "\"");
      }
      if (stream_decode(t, ids, skip) != want && ++failures <= 20) {
        FAIL_CHECK(c.str("name") << ": stream decode got \"" << stream_decode(t, ids, skip)
                                 << "\"");
      }
    }
    CHECK(failures == 0);
    MESSAGE("decode cases: " << n);
  }

  TEST_CASE("stream decoder holds back incomplete UTF-8") {
    const Tokenizer& t = qwen();
    // "€" is E2 82 AC; feed it one byte token at a time (byte tokens are ids of single bytes).
    std::vector<int32_t> ids = t.encode("a€b");
    StreamDecoder d(t, false);
    int32_t e2 = t.token_id("â"), x82 = t.token_id("Ĥ"), xac = t.token_id("¬");
    REQUIRE(e2 >= 0);
    REQUIRE(x82 >= 0);
    REQUIRE(xac >= 0);
    CHECK(d.push(t.token_id("a")) == "a");
    CHECK(d.push(e2) == "");
    CHECK(d.push(x82) == "");
    CHECK(d.push(xac) == "€");
    CHECK(d.push(e2) == "");
    CHECK(d.push(t.token_id("b")) ==
          "\xEF\xBF\xBD"
          "b");                            // E2 then 'b': invalid, replaced
    CHECK(d.push(x82) == "\xEF\xBF\xBD");  // a lone continuation byte
    CHECK(d.push(e2) == "");
    CHECK(d.flush() == "\xEF\xBF\xBD");
    CHECK(d.flush() == "");
    CHECK(t.decode(ids, false) == "a€b");
  }

  TEST_CASE("round trip on long and random inputs") {
    const Tokenizer& t = qwen();
    // Long runs exercise the heap merge path and the regex's backtracking on whitespace.
    for (std::string s :
         {std::string(100000, ' '), std::string(50000, 'a'), std::string(20000, '\n') + "x",
          std::string(3000, '7'), std::string(40000, '-')}) {
      std::vector<int32_t> ids = t.encode(s);
      CHECK(t.decode(ids, false) == s);
    }
    std::mt19937 rng(1234);
    const std::vector<std::string> alphabet = {"a",
                                               "B",
                                               " ",
                                               "  ",
                                               "\n",
                                               "\r\n",
                                               "\t",
                                               "'s",
                                               "'LL",
                                               "7",
                                               "٣",
                                               "²",
                                               "Ⅻ",
                                               "é",
                                               "e\xCC\x81",
                                               "中",
                                               "文",
                                               "😀",
                                               "\xC2\x85",
                                               "\xE2\x80\x8B",
                                               "\xEF\xBB\xBF",
                                               "\xE3\x80\x80",
                                               "<|im_end|>",
                                               "<think>",
                                               "<",
                                               "|",
                                               "!",
                                               "...",
                                               "ſ",
                                               "Ǆ",
                                               "\xE1\x84\x80\xE1\x85\xA1"};
    for (int iter = 0; iter < 2000; ++iter) {
      std::string s;
      int len = int(rng() % 40);
      for (int k = 0; k < len; ++k) s += alphabet[rng() % alphabet.size()];
      std::vector<int32_t> ids = t.encode(s);
      std::string back = t.decode(ids, false);
      if (back != nfc_ref(s)) FAIL_CHECK("round trip failed for \"" << s << "\"");
      if (stream_decode(t, ids, false) != back)
        FAIL_CHECK("stream decode differs for \"" << s << "\"");
      std::string joined;
      for (auto& p : t.pretokenize(s)) joined += p;
      if (joined != nfc_ref(s)) FAIL_CHECK("pieces do not cover \"" << s << "\"");
    }
  }

  TEST_CASE("whitespace is Unicode White_Space") {
    // A doubled character tells: whitespace gives "\s+(?!\S)" then a letter run with one leading
    // non-letter; anything else is one punctuation run. U+180E is not White_Space (PCRE2's UCP \s
    // would take it), U+0085 is, U+200B is not.
    const Tokenizer& t = qwen();
    using V = std::vector<std::string>;
    CHECK(t.pretokenize("a\xE1\xA0\x8E\xE1\xA0\x8E"
                        "b") == V{"a", "\xE1\xA0\x8E\xE1\xA0\x8E", "b"});
    CHECK(t.pretokenize("x\xC2\x85\xC2\x85y") == V{"x", "\xC2\x85", "\xC2\x85y"});
    CHECK(t.pretokenize("x\xE2\x80\x8B\xE2\x80\x8By") == V{"x", "\xE2\x80\x8B\xE2\x80\x8B", "y"});
    CHECK(t.pretokenize("x\xE3\x80\x80\xE3\x80\x80y") == V{"x", "\xE3\x80\x80", "\xE3\x80\x80y"});
  }

  TEST_CASE("concurrent encodes agree with sequential ones") {
    const Tokenizer& t = qwen();
    std::vector<std::string> texts;
    for (const Case& c : read_cases("tokenize.jsonl")) texts.push_back(c.str("text"));
    std::vector<std::vector<int32_t>> want;
    for (auto& s : texts) want.push_back(t.encode(s));
    Tokenizer copy = t;  // copies share the model and its cache
    std::vector<int> bad(4, 0);
    std::vector<std::thread> threads;
    for (int k = 0; k < 4; ++k) {
      threads.emplace_back([&, k] {
        const Tokenizer& tk = (k % 2) ? copy : t;
        for (int rep = 0; rep < 3; ++rep) {
          for (size_t i = size_t(k); i < texts.size(); i += 2)
            bad[size_t(k)] += tk.encode(texts[i]) != want[i];
        }
      });
    }
    for (auto& th : threads) th.join();
    for (int k = 0; k < 4; ++k) CHECK(bad[size_t(k)] == 0);
  }

  TEST_CASE("invalid UTF-8 input is replaced, not rejected") {
    const Tokenizer& t = qwen();
    CHECK(t.decode(t.encode("a\xFF"
                            "b"),
                   false) ==
          "a\xEF\xBF\xBD"
          "b");
    CHECK(t.decode(t.encode("\xE2\x82"), false) == "\xEF\xBF\xBD");
  }

  TEST_CASE("merges as strings or pairs, added token flags") {
    Tokenizer a = Tokenizer::from_json(tiny_json(R"(,"merges":["a b","ab c","Ġ a"])"), "");
    Tokenizer b =
        Tokenizer::from_json(tiny_json(R"(,"merges":[["a","b"],["ab","c"],["Ġ","a"]])"), "");
    for (const Tokenizer* t : {&a, &b}) {
      CHECK(t->encode("abc") == std::vector<int32_t>{257});
      CHECK(t->encode("abd") == std::vector<int32_t>{256, 'd'});
      CHECK(t->encode("x a") == std::vector<int32_t>{'x', 258});
      CHECK(t->encode("ab<|end|>c") == std::vector<int32_t>{256, 259, 'c'});
      // lstrip/rstrip: the whitespace around <x> belongs to the token.
      CHECK(t->encode("ab  <x>  c") == std::vector<int32_t>{256, 260, 'c'});
      CHECK(t->pretokenize("ab  <x>  c") == std::vector<std::string>{"ab", "  <x>  ", "c"});
      CHECK(t->decode({256, 259, 'c'}, true) == "abc");
      CHECK(t->decode({256, 259, 'c'}, false) == "ab<|end|>c");
      // single_word: only where no word character touches the token.
      CHECK(t->encode("x <w> y") == std::vector<int32_t>{'x', 32, 261, 32, 'y'});
      CHECK(t->encode("x<w>y").size() == 5);
      // normalized=true: matched after NFC, so both spellings of "café" hit it.
      CHECK(t->encode("cafe\xCC\x81") == std::vector<int32_t>{262});
      CHECK(t->encode("caf\xC3\xA9!") == std::vector<int32_t>{262, '!'});
      CHECK(t->vocab_size() == 263);
      CHECK(t->chat_template().empty());
      CHECK(t->eos_token().empty());
    }
  }

  TEST_CASE("an added token that takes a vocab id leaves the vocab spelling its id") {
    // As in `tokenizers`: the vocab maps "ab" to 256 still, and 256 decodes as the added token.
    std::string j = tiny_json(R"(,"merges":["a b","ab c","Ġ a"])");
    const std::string x = R"({"id":260,"content":"<x>")";
    j.replace(j.find(x), x.size(), R"({"id":256,"content":"<x>")");
    const Tokenizer t = Tokenizer::from_json(j, "");
    CHECK(t.token_id("ab") == 256);
    CHECK(t.token_id("<x>") == 256);
    CHECK(t.token_text(256) == "<x>");
    CHECK(t.encode("abc") == std::vector<int32_t>{257});
    CHECK(t.encode("ab d") == std::vector<int32_t>{256, 32, 'd'});
    // Two vocab spellings of one id: both find it, the later is its text, merges still resolve.
    std::string d = tiny_json(R"(,"merges":["a b","ab c","Ġ a"])");
    d.replace(d.find(R"("Ġa":258)"), 9, R"("Ġa":258,"zq":256)");
    const Tokenizer u = Tokenizer::from_json(d, "");
    CHECK(u.token_id("ab") == 256);
    CHECK(u.token_id("zq") == 256);
    CHECK(u.token_text(256) == "zq");
    CHECK(u.encode("abc") == std::vector<int32_t>{257});
  }

  TEST_CASE("tokenizer_config variants") {
    std::string tj = tiny_json(R"(,"merges":[])");
    Tokenizer t = Tokenizer::from_json(
        tj,
        R"({"chat_template":[{"name":"tool_use","template":"T"},{"name":"default","template":"D"}],
               "eos_token":{"content":"<|end|>","lstrip":false},"bos_token":null})");
    CHECK(t.chat_template() == "D");
    CHECK(t.eos_token() == "<|end|>");
    CHECK(t.bos_token().empty());
    CHECK_THROWS_AS(Tokenizer::from_json(tj, "{"), hearth::Error);
  }

  TEST_CASE("malformed tokenizer.json gives clear errors") {
    CHECK(error_of("{\"model\": ").find("tokenizer.json: invalid JSON") != std::string::npos);
    CHECK(error_of(tiny_json(R"(,"merges":[])", "WordPiece")).find("model.type is \"WordPiece\"") !=
          std::string::npos);
    CHECK(error_of(tiny_json("")).find("model.merges") != std::string::npos);
    CHECK(error_of(tiny_json(R"(,"merges":["a zz"])")).find("\"zz\" is not in the vocab") !=
          std::string::npos);
    CHECK(error_of(tiny_json(R"(,"merges":[3])")).find("model.merges[0]") != std::string::npos);
    std::string unigram = tiny_json(R"(,"merges":[])");
    std::string bad_norm = unigram;
    bad_norm.replace(bad_norm.find("{\"type\":\"NFC\"}"), 14, "{\"type\":\"NFKC\"}");
    CHECK(error_of(bad_norm).find("normalizer \"NFKC\"") != std::string::npos);
    std::string bad_split = unigram;
    bad_split.replace(bad_split.find("\"Isolated\""), 10, "\"Removed\"");
    CHECK(error_of(bad_split).find("behavior \"Removed\"") != std::string::npos);
    std::string bad_regex = unigram;
    bad_regex.replace(bad_regex.find(" ?\\\\S+"), 6, "(unclosed");
    CHECK(error_of(bad_regex).find("cannot compile regex") != std::string::npos);
    CHECK_THROWS_WITH_AS(Tokenizer::load("/nonexistent-dir"),
                         doctest::Contains("/nonexistent-dir/tokenizer.json"), hearth::Error);
  }

  TEST_CASE("token ids are checked against the model's vocab_size, not used to size tables") {
    const std::string no_merges = R"(,"merges":[])";
    std::string j = tiny_json(no_merges);
    const std::string big = std::to_string(INT32_MAX);
    j.replace(j.find("\"id\":259"), 8, "\"id\":" + big);
    std::string e;
    try {
      Tokenizer::from_json(j, "", 300);
    } catch (const hearth::Error& err) {
      e = err.what();
    }
    CAPTURE(e);
    CHECK(e.find("added_tokens[0].id is 2147483647, outside [0, 300) (vocab_size)") !=
          std::string::npos);
    // Without a vocab_size the limit is 2^24, named as such.
    CHECK(error_of(j).find("outside [0, 16777216) (the largest vocabulary hearth accepts)") !=
          std::string::npos);
    std::string v = tiny_json(no_merges);
    v.replace(v.find("\"ab\":256"), 8, "\"ab\":4000000000");
    CHECK(error_of(v).find("model.vocab[\"ab\"] is 4000000000, outside") != std::string::npos);
    CHECK_NOTHROW(Tokenizer::from_json(tiny_json(no_merges), "", 263));
  }
}
